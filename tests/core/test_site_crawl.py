"""The site-crawl source: breadth-first discovery over a site's links, within scope, depth and max pages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipelines_dagster.core.frontier import Frontier
from pipelines_dagster.core.site_config import SiteConfig
from pipelines_dagster.core.site_crawl import Discovered, SiteSource

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


def test_a_failed_page_adds_nothing_and_a_canonical_url_is_admitted_like_a_link():
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier)
        [root] = source.take(10)
        source.done(Discovered(url=root, status="failed", links=[f"{SITE}/never"]))
        assert source.take(10) == []
    with Frontier(max_pages=100, max_depth=5) as frontier:
        source = source_for(frontier)
        [root] = source.take(10)
        source.done(Discovered(url=root, canonical=f"{SITE}/home", links=[f"{SITE}/a"]))
        assert source.take(10) == [f"{SITE}/home", f"{SITE}/a"]


def test_sitemap_pages_are_one_level_down_and_scoped():
    with Frontier(max_pages=100, max_depth=1) as frontier:
        source = source_for(frontier, max_depth=1)
        added = source.add_sitemap_urls([f"{SITE}/from-sitemap", "https://elsewhere.example.net/x", f"{SITE}/"])
        assert added == 1
        assert source.take(10) == [f"{SITE}/", f"{SITE}/from-sitemap"]
