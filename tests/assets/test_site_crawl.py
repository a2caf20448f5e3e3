"""Site crawls through a real pipeline run: discovery from sitemaps and links finds exactly the pages in
scope, and nothing off the site is ever requested."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest

from pipelines_dagster.agent_tools import build_page_change_tools
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.core.crawl.extract.links import MAX_LINKS_PER_PAGE
from pipelines_dagster.core.crawl.record import read_crawl
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.crawl_metadata import CrawlMetadata
from tests.assets.conftest import Stack, materialization
from tests.support.web import Reply, WebServer, page, redirect

XML = "application/xml"


def links(*hrefs: str) -> str:
    return "".join(f'<p>See <a href="{href}">{href}</a> for more.</p>' for href in hrefs)


def linked_page(title: str, *hrefs: str, canonical: str | None = None) -> Reply:
    head = f'<link rel="canonical" href="{canonical}">' if canonical else ""
    body = (
        f"<!DOCTYPE html><html><head><title>{title}</title>{head}</head><body><article><h1>{title}</h1>"
        f"<p>What {title} is about, in a paragraph long enough to keep.</p>{links(*hrefs)}</article></body></html>"
    )
    return Reply(body=body)


def urlset(*locs: str) -> str:
    entries = "".join(f"<url><loc>{loc}</loc><lastmod>2026-11-30</lastmod></url>" for loc in locs)
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'


@pytest.fixture
def elsewhere() -> Iterator[WebServer]:
    """Another site (reached as `localhost`): a crawl of the test site must never request it."""
    with WebServer() as server:
        for path in ("/", "/offsite", "/sitemap.xml", "/landing", "/listed"):
            server.route(path, page("Elsewhere", "Not part of the site."))
        yield server


def build_site(web: WebServer, elsewhere: WebServer) -> str:
    """The test site; its start URL."""
    off = elsewhere.url("", host="localhost")
    web.route(
        "/robots.txt",
        Reply(body=f"User-agent: *\nSitemap: {web.url('/sitemap_index.xml')}\n", content_type="text/plain"),
    )
    index = (
        '<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<sitemap><loc>{web.url('/sitemap-docs.xml.gz')}</loc></sitemap>"
        f"<sitemap><loc>{off}/sitemap.xml</loc></sitemap></sitemapindex>"
    )
    web.route("/sitemap_index.xml", Reply(body=index, content_type=XML))
    docs = urlset(web.url("/docs/a"), web.url("/docs/b"), f"{off}/listed")
    web.route("/sitemap-docs.xml.gz", Reply(body=gzip.compress(docs.encode()), content_type="application/gzip"))
    web.route(
        "/",
        linked_page(
            "Home",
            "/docs/a",
            "/guide",
            "/guide/print",
            "/old",
            "/private/x",
            "/leaves",
            "http://10.0.0.1/admin",
            f"{off}/offsite",
            "mailto:team@example.com",
        ),
    )
    web.route("/guide", linked_page("Guide", "/guide/deep", "/"))
    web.route("/guide/deep", linked_page("Deep", "/guide", "/guide#top"))
    # The same text as /guide, which it names as canonical: a copy, not stored.
    web.route("/guide/print", linked_page("Guide", "/guide/deep", "/", canonical="/guide"))
    web.route("/old", redirect("/guide/new"))
    web.route("/guide/new", linked_page("New guide"))
    web.route("/leaves", redirect(f"{off}/landing"))
    web.route("/private/x", linked_page("Private"))
    web.route("/docs/a", linked_page("Doc A"))  # /docs/b is in the (gzipped) sitemap only
    web.route("/docs/b", linked_page("Doc B"))
    return web.url("/")


def site_config(start: str, **bounds) -> SiteConfig:
    return SiteConfig.validated(start_urls=[start], exclude=["/private/**"], **bounds)


def test_a_site_crawl_stores_exactly_the_pages_in_scope_and_requests_nothing_off_it(
    embedded: Stack, elsewhere: WebServer
):
    start = build_site(embedded.web, elsewhere)
    workspace_id, pipeline_id = embedded.pipeline([], site=site_config(start))
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success
    crawl = CrawlMetadata.read(materialization(result, "crawl_results"))
    records = {
        record.url.removeprefix(embedded.web.base_url): record for record in read_crawl(embedded.blob, crawl.blob_key)
    }
    # The redirected page under its final URL, the canonical copy not at all.
    assert set(records) == {"/", "/docs/a", "/docs/b", "/guide", "/guide/deep", "/guide/new", "/leaves"}
    assert records["/guide/new"].final_url == embedded.web.url("/guide/new") and records["/guide/new"].succeeded
    assert records["/leaves"].status == "failed" and "out of the crawl's scope" in (records["/leaves"].error or "")
    assert (crawl.pages_discovered, crawl.discovery_truncated, crawl.pages_duplicate) == (8, False, 1)
    # Nothing off the site, nothing excluded, each page once.
    assert elsewhere.requests == []
    assert embedded.web.hits("/private/x") == 0
    assert embedded.web.hits("/sitemap_index.xml") == embedded.web.hits("/sitemap-docs.xml.gz") == 1
    # robots.txt once, for its rules and its Sitemap: lines alike.
    assert embedded.web.hits("/robots.txt") == 1
    pages = [r.path for r in embedded.web.requests if not r.path.startswith(("/robots.txt", "/sitemap"))]
    assert sorted(pages) == sorted(
        ["/", "/docs/a", "/docs/b", "/guide", "/guide/deep", "/guide/print", "/old", "/guide/new", "/leaves"]
    )
    ready = {document.title for document in embedded.documents(workspace_id) if document.status_state == "ready"}
    assert ready == {"Home", "Doc A", "Doc B", "Guide", "Deep", "New guide"}


def test_a_re_crawl_of_an_unchanged_site_still_finds_every_page(embedded: Stack, elsewhere: WebServer):
    start = build_site(embedded.web, elsewhere)
    workspace_id, pipeline_id = embedded.pipeline([], site=site_config(start))
    first = CrawlMetadata.read(materialization(embedded.run(pipeline_id, workspace_id), "crawl_results"))
    second = CrawlMetadata.read(materialization(embedded.run(pipeline_id, workspace_id), "crawl_results"))
    # The pages are not parsed again (the same bytes): their links come from the first crawl's records.
    assert second.urls_unchanged == second.urls_succeeded == first.urls_succeeded
    assert second.pages_discovered == first.pages_discovered == 8


def test_a_crawl_stopped_at_max_pages_says_so(embedded: Stack, elsewhere: WebServer):
    start = build_site(embedded.web, elsewhere)
    workspace_id, pipeline_id = embedded.pipeline([], site=site_config(start, max_pages=3))
    crawl = CrawlMetadata.read(materialization(embedded.run(pipeline_id, workspace_id), "crawl_results"))
    assert (crawl.urls_attempted, crawl.pages_discovered, crawl.discovery_truncated) == (3, 3, True)


def test_what_a_site_crawl_could_not_read_whole_is_counted_and_told_in_its_run_log(embedded: Stack):
    web = embedded.web
    web.route(
        "/robots.txt", Reply(body=f"User-agent: *\nSitemap: {web.url('/broken.xml')}\n", content_type="text/plain")
    )
    web.route("/broken.xml", Reply(body="this is not a sitemap", content_type=XML))
    web.route("/", linked_page("Index", *(f"/p/{number}" for number in range(MAX_LINKS_PER_PAGE + 5))))
    workspace_id, pipeline_id = embedded.pipeline([], site=site_config(web.url("/"), max_pages=3))
    result = embedded.run(pipeline_id, workspace_id)
    crawl = CrawlMetadata.read(materialization(result, "crawl_results"))
    assert (crawl.pages_links_capped, crawl.sitemaps_truncated) == (1, 0)
    # The broken sitemap, and /sitemap.xml, which the site does not have.
    assert crawl.sitemaps_skipped == 2
    logged = [entry.user_message for entry in embedded.instance.all_logs(result.run_id) if entry.dagster_event is None]
    assert any("/broken.xml" in line and "skipped" in line for line in logged), logged
    assert any(f"only the first {MAX_LINKS_PER_PAGE} are followed" in line for line in logged), logged


def test_the_credit_check_asks_for_max_pages_before_any_request(embedded: Stack, elsewhere: WebServer):
    embedded.billing_enabled = True
    start = build_site(embedded.web, elsewhere)
    # Enough for the 7 pages the site has, not for the 8 a crawl of max 8 pages may fetch.
    workspace_id, pipeline_id = embedded.pipeline(
        [], site=site_config(start, max_pages=8), credit=7 * embedded.micros_per_crawl
    )
    refused = embedded.run(pipeline_id, workspace_id)
    assert not refused.success
    assert embedded.web.requests == []


def test_page_changes_and_the_chat_tool_follow_the_pages_discovery_finds(embedded: Stack):
    web = embedded.web
    web.route("/", linked_page("Home", "/a", "/b"))
    web.route("/a", linked_page("A"))
    web.route("/b", linked_page("B"))
    workspace_id, pipeline_id = embedded.pipeline([], site=SiteConfig.validated(start_urls=[web.url("/")]))
    assets = [crawl_results, kb_documents, page_changes]
    assert embedded.run(pipeline_id, workspace_id, assets=assets).success
    # The site changes: /a is rewritten, /b is no longer linked, /c is new.
    web.route("/", linked_page("Home", "/a", "/c"))
    web.route("/a", linked_page("A", "/"))
    web.route("/c", linked_page("C"))
    second = embedded.run(pipeline_id, workspace_id, assets=assets)
    assert second.success

    [tool] = build_page_change_tools(workspace_id=workspace_id, sessions=embedded.sessions)
    latest = {}
    for line in reversed(tool(limit=100).splitlines()):  # oldest first: the last word on each URL wins
        _, status, url, *_ = line.split(" • ")
        latest[url.removeprefix(web.base_url)] = status
    assert latest == {"/": "changed", "/a": "changed", "/b": "removed", "/c": "new"}
    assert tool(status="removed").split(" • ")[2] == web.url("/b")
    archived = {d.url: d.archived_by_run_id for d in embedded.documents(workspace_id) if d.archived_at is not None}
    assert archived == {web.url("/b"): second.run_id}


def test_the_start_url_is_fetched_whatever_the_include_rules_and_discovery_goes_on_from_it(embedded: Stack):
    # The README's shape: start at the site's root, crawl only /docs/**. The root is outside the include
    # rules, and is fetched all the same (as Firecrawl and Scrapy do): its links are how /docs/a is found.
    web = embedded.web
    web.route("/", linked_page("Home", "/docs/a", "/blog/x"))
    web.route("/docs/a", linked_page("Doc A", "/docs/b", "/"))
    web.route("/docs/b", linked_page("Doc B"))
    web.route("/blog/x", linked_page("Blog"))
    site = SiteConfig.validated(start_urls=[web.url("/")], include=["/docs/**"])
    workspace_id, pipeline_id = embedded.pipeline([], site=site)
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success
    crawl = CrawlMetadata.read(materialization(result, "crawl_results"))
    stored = {record.url.removeprefix(web.base_url) for record in read_crawl(embedded.blob, crawl.blob_key)}
    assert stored == {"/", "/docs/a", "/docs/b"}
    assert (crawl.urls_attempted, crawl.crawl_healthy) == (3, True)
    assert web.hits("/blog/x") == 0 and web.hits("/") == 1
