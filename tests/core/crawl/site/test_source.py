"""The site-crawl source: breadth-first discovery over a site's links, within scope, depth and max pages."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pytest

from pipelines_dagster.core.crawl.extract.links import MAX_LINKS_PER_PAGE
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.crawl.site.frontier import Frontier
from pipelines_dagster.core.crawl.site.source import Discovered, SiteSource

SITE = "https://docs.example.com"


def crawl(source: SiteSource, site: Mapping[str, Sequence[str]], *, batch: int = 2) -> list[str]:
    """Drive the source as the crawler does: take a batch, report each page; the fetch order."""
    fetched: list[str] = []
    while urls := source.take(batch):
        for url in urls:
            fetched.append(url)
            source.done(Discovered(url=url, status="success" if url in site else "failed", links=site.get(url, ())))
    return fetched


def source_for(frontier: Frontier, **config) -> SiteSource:
    return SiteSource(SiteConfig.validated(start_urls=[f"{SITE}/"], **config), frontier)


def test_pages_are_fetched_breadth_first_once_each_with_loops_and_variants_folded():
    site = {
        f"{SITE}/": [f"{SITE}/a", f"{SITE}/b#top", f"{SITE}/"],
        f"{SITE}/a": [f"{SITE}/a/1", f"{SITE}/", "https://DOCS.example.com:443/b"],
        f"{SITE}/b": [f"{SITE}/b/1?utm_source=x", f"{SITE}/a"],
        f"{SITE}/a/1": [f"{SITE}/a"],
        f"{SITE}/b/1": [],
    }
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier, drop_query_params="utm_source")
        assert crawl(source, site) == [f"{SITE}/", f"{SITE}/a", f"{SITE}/b", f"{SITE}/a/1", f"{SITE}/b/1"]
        assert not source.truncated and source.discovered == 5 and source.in_flight == 0


def test_nothing_off_scope_is_handed_out():
    site = {
        f"{SITE}/": [
            "https://other.example.org/page",
            "https://blog.example.com/post",  # another host: subdomains are off
            f"{SITE}/private/secret",
            "mailto:team@example.com",
            "javascript:void(0)",
            f"{SITE}/guide",
        ],
        f"{SITE}/guide": [],
    }
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier, exclude=["/private/**"])
        assert crawl(source, site) == [f"{SITE}/", f"{SITE}/guide"]
        assert source.out_of_scope == 5


def test_subdomains_widen_the_scope_to_the_registrable_domain():
    site = {f"{SITE}/": ["https://blog.example.com/post", "https://example.org/x"], "https://blog.example.com/post": []}
    with Frontier(max_pages=100, max_depth=5) as frontier:
        assert crawl(source_for(frontier, subdomains=True), site) == [f"{SITE}/", "https://blog.example.com/post"]


def test_depth_bounds_discovery():
    site = {f"{SITE}/": [f"{SITE}/1"], f"{SITE}/1": [f"{SITE}/2"], f"{SITE}/2": [f"{SITE}/3"], f"{SITE}/3": []}
    with Frontier(max_pages=100, max_depth=1) as frontier:
        source = source_for(frontier, max_depth=1)
        assert crawl(source, site) == [f"{SITE}/", f"{SITE}/1"]
        assert not source.truncated  # a depth bound is not a truncated crawl


def test_max_pages_stops_discovery_and_says_so():
    site = {f"{SITE}/": [f"{SITE}/{n}" for n in range(10)]} | {f"{SITE}/{n}": [] for n in range(10)}
    with Frontier(max_pages=4, max_depth=5) as frontier:
        source = source_for(frontier, max_pages=4)
        assert len(crawl(source, site)) == 4
        assert source.truncated


def test_an_unchanged_page_is_expanded_from_the_links_the_previous_crawl_stored():
    stored = {f"{SITE}/": [f"{SITE}/kept"]}
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = SiteSource(
            SiteConfig.validated(start_urls=[f"{SITE}/"]), frontier, stored_links=lambda url: stored.get(url, ())
        )
        [root] = source.take(10)
        source.done(Discovered(url=root, unchanged=True))
        assert source.take(10) == [f"{SITE}/kept"]


def test_a_failed_page_adds_nothing_and_is_stored_under_its_own_url():
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier)
        [root] = source.take(10)
        failed = Discovered(url=root, final_url=f"{SITE}/moved", status="failed", links=[f"{SITE}/never"])
        assert source.done(failed) == [(root, failed)]
        assert source.take(10) == []


def test_a_redirected_page_is_stored_once_under_its_final_url():
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier)
        [root] = source.take(10)
        source.done(Discovered(url=root, links=[f"{SITE}/old", f"{SITE}/new", f"{SITE}/other"]))
        assert source.take(1) == [f"{SITE}/old"]
        moved = Discovered(url=f"{SITE}/old", final_url=f"{SITE}/new#top", content_hash="n")
        assert source.done(moved) == [(f"{SITE}/new", moved)]
        # /new is linked too, but the crawl has its page: it is not fetched again.
        assert source.take(10) == [f"{SITE}/other"]
        # A request already in flight to a page stored meanwhile ends as a duplicate.
        source.done(Discovered(url=f"{SITE}/other", links=[f"{SITE}/new"]))
        assert source.take(10) == []
        assert source.done(Discovered(url=f"{SITE}/x", final_url=f"{SITE}/new")) == []
        assert source.duplicates == 1


def test_a_page_with_the_text_of_its_canonical_is_a_duplicate():
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier, max_depth=5)
        [root] = source.take(10)
        source.done(Discovered(url=root, links=[f"{SITE}/print?page=a"]))
        [variant] = source.take(10)
        copy = Discovered(url=variant, canonical=f"{SITE}/a", content_hash="a", links=[f"{SITE}/from-copy"])
        assert source.done(copy) == []  # held back until /a is crawled
        assert source.take(10) == [f"{SITE}/a"]  # the canonical is fetched
        page = Discovered(url=f"{SITE}/a", content_hash="a", links=[f"{SITE}/b"])
        assert source.done(page) == [(f"{SITE}/a", page)]
        assert source.take(10) == [f"{SITE}/b"]  # the copy's links are not followed
        assert source.duplicates == 1
        # A copy met after its canonical was stored is dropped at once.
        source.done(Discovered(url=f"{SITE}/b", links=[f"{SITE}/a?ref=1"]))
        [again] = source.take(10)
        assert source.done(Discovered(url=again, canonical=f"{SITE}/a", content_hash="a")) == []
        assert source.duplicates == 2


def test_a_canonical_with_other_text_is_a_mistake_and_both_pages_are_stored():
    """A site whose every page names the home page as canonical loses none of them."""
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier)
        [root] = source.take(10)
        home = Discovered(url=root, content_hash="home", links=[f"{SITE}/a"])
        assert source.done(home) == [(root, home)]
        [a] = source.take(10)
        page = Discovered(url=a, canonical=f"{SITE}/", content_hash="a", links=[f"{SITE}/b"])
        assert source.done(page) == [(a, page)]
        assert source.take(10) == [f"{SITE}/b"]
        # Held back for a canonical not crawled yet, then stored when it turns out different, or
        # failed, and its links followed.
        b = Discovered(url=f"{SITE}/b", canonical=f"{SITE}/c", content_hash="b", links=[f"{SITE}/d"])
        assert source.done(b) == []
        assert source.take(10) == [f"{SITE}/c"]
        c = Discovered(url=f"{SITE}/c", status="failed")
        assert source.done(c) == [(f"{SITE}/c", c), (f"{SITE}/b", b)]
        assert source.take(10) == [f"{SITE}/d"]
        assert source.duplicates == 0


def test_pages_still_held_back_when_the_crawl_runs_out_are_stored_by_finish():
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier)
        [root] = source.take(10)
        page = Discovered(url=root, canonical=f"{SITE}/elsewhere", content_hash="r", links=[f"{SITE}/a"])
        assert source.done(page) == []
        assert source.take(10) == [f"{SITE}/elsewhere"]
        assert source.finish() == [(root, page)]
        assert source.take(10) == [f"{SITE}/a"]
        assert source.finish() == []


@pytest.mark.parametrize("canonical", ["https://mirror.example.org/", f"{SITE}/private/x"])
def test_a_canonical_out_of_scope_is_ignored(canonical):
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier, exclude=["/private/**"])
        [root] = source.take(10)
        page = Discovered(url=root, canonical=canonical, content_hash="r")
        assert source.done(page) == [(root, page)]
        assert source.take(10) == []


def test_sitemap_pages_are_one_level_down_and_scoped():
    with Frontier(max_pages=100, max_depth=1) as frontier:
        source = source_for(frontier, max_depth=1)
        added = source.add_sitemap_urls([f"{SITE}/from-sitemap", "https://elsewhere.example.net/x", f"{SITE}/"])
        assert added == 1
        assert source.take(10) == [f"{SITE}/", f"{SITE}/from-sitemap"]


def test_a_page_whose_links_reached_the_cap_is_counted_and_logged(caplog):
    capped = [f"{SITE}/p/{number}" for number in range(MAX_LINKS_PER_PAGE)]
    with Frontier(max_pages=100, max_depth=5) as frontier, caplog.at_level(logging.WARNING):
        source = source_for(frontier)
        [start] = source.take(1)
        source.done(Discovered(url=start, links=capped))
        [page] = source.take(1)
        source.done(Discovered(url=page, links=capped[:10]))
    assert source.links_capped == 1
    assert [record.getMessage() for record in caplog.records] == [
        f"page {SITE}/ has {MAX_LINKS_PER_PAGE} links or more; only the first {MAX_LINKS_PER_PAGE} are followed"
    ]


def test_start_urls_are_handed_out_whatever_include_and_exclude_say():
    site = {f"{SITE}/": [f"{SITE}/docs/a", f"{SITE}/blog"], f"{SITE}/docs/a": [f"{SITE}/"]}
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier, include=["/docs/**"], exclude=["/"])
        assert crawl(source, site) == [f"{SITE}/", f"{SITE}/docs/a"]
