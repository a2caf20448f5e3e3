"""Sitemaps fetched by a site crawl on a loopback server: under the sitemap protocol's own 50 MiB
cap rather than a page's, read to that cap when longer, and a skipped one logged with why."""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import Iterator

import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.crawl.site.frontier import Frontier
from pipelines_dagster.core.crawl.site.source import MAX_SITEMAP_BYTES, SiteSource
from pipelines_dagster.core.crawl.types import MiB
from tests.core.crawl.test_crawler import ARTICLE, BASE
from tests.support.web import Reply, WebServer, page

pytestmark = pytest.mark.usefixtures("loopback_only")


@pytest.fixture(scope="module")
def crawler() -> Iterator[Crawler]:
    with Crawler(BASE) as shared:
        yield shared


def urlset(web: WebServer, before: list[str], *, padding: int, after: list[str]) -> bytes:
    """A sitemap listing `before`, then `padding` bytes of comment (an entry's worth of bytes many
    times over, as long lastmods and image extensions make), then `after`."""

    def entries(paths: list[str]) -> str:
        return "".join(f"<url><loc>{web.url(path)}</loc></url>" for path in paths)

    return (
        f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries(before)}'
        f"<!--{' ' * padding}-->{entries(after)}</urlset>"
    ).encode()


def site_crawl(web: WebServer, crawler: Crawler, sitemap: Reply) -> tuple[SiteSource, set[str]]:
    """Crawl the site from a start page that links nowhere; the paths fetched."""
    web.route("/", page("Home", ARTICLE))
    web.route("/sitemap.xml", sitemap)
    config = SiteConfig.validated(start_urls=[web.url("/")], max_pages=20)

    with Frontier(max_pages=config.max_pages, max_depth=config.max_depth) as frontier:
        source: SiteSource = SiteSource(config, frontier)

        async def run() -> set[str]:
            outcomes = [outcome async for outcome in crawler.crawl_source(source)]
            return {outcome.url.split("/", 3)[3] for outcome in outcomes if outcome.status == "success"}

        return source, asyncio.run(run())


def test_a_sitemap_over_the_page_cap_is_read_and_its_pages_crawled(web: WebServer, crawler: Crawler) -> None:
    for path in ("/early", "/late"):
        web.route(path, page(path, ARTICLE))
    body = urlset(web, ["/early"], padding=6 * MiB, after=["/late"])
    assert BASE.max_body_bytes < 5 * MiB < len(body) < MAX_SITEMAP_BYTES
    source, fetched = site_crawl(web, crawler, Reply(body=body, content_type="application/xml", chunked=True))
    assert fetched == {"", "early", "late"}
    assert (source.sitemaps_read, source.sitemaps_skipped, source.sitemaps_truncated) == (1, 0, 0)


def test_a_sitemap_over_50_mib_is_read_to_its_cap_and_says_so(
    web: WebServer, crawler: Crawler, caplog: pytest.LogCaptureFixture
) -> None:
    for path in ("/early", "/late"):
        web.route(path, page(path, ARTICLE))
    body = urlset(web, ["/early"], padding=55 * MiB, after=["/late"])
    with caplog.at_level(logging.WARNING, logger="pipelines_dagster.core.crawl.site.source"):
        source, fetched = site_crawl(web, crawler, Reply(body=body, content_type="application/xml"))
    assert fetched == {"", "early"}  # the entries before the cut; /late is past it
    assert source.sitemaps_truncated == 1
    assert f"sitemap {web.url('/sitemap.xml')} lists more than was read (at most {MAX_SITEMAP_BYTES} bytes" in (
        caplog.text
    )


def test_a_sitemap_listing_more_than_max_pages_is_not_taken_for_a_cut_one(
    web: WebServer, crawler: Crawler, caplog: pytest.LogCaptureFixture
) -> None:
    paths = [f"/p{number}" for number in range(30)]
    for path in paths:
        web.route(path, page(path, ARTICLE))
    body = urlset(web, paths, padding=0, after=[])
    with caplog.at_level(logging.WARNING, logger="pipelines_dagster.core.crawl.site.source"):
        source, fetched = site_crawl(web, crawler, Reply(body=body, content_type="application/xml"))
    # Max pages (20) stopped discovery, which `truncated` says; the sitemap was read whole.
    assert len(fetched) == 20 and source.truncated
    assert (source.sitemaps_read, source.sitemaps_truncated) == (1, 0)
    assert "lists more than was read" not in caplog.text


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\x1f\x8b\x08\x00broken", "is not a valid gzip file"),
        (b"<html><body>a page, not a sitemap</body></html>", "its root element is <html>"),
        (gzip.compress(b"<urlset><url><loc>/a</loc></url>", mtime=0), "is not well-formed XML"),
    ],
)
def test_a_sitemap_that_cannot_be_read_is_skipped_with_a_logged_reason(
    web: WebServer, crawler: Crawler, caplog: pytest.LogCaptureFixture, body: bytes, why: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="pipelines_dagster.core.crawl.site.source"):
        source, fetched = site_crawl(web, crawler, Reply(body=body, content_type="application/xml"))
    assert fetched == {""}
    assert source.sitemaps_skipped == 1 and source.sitemaps_read == 0
    [record] = [record for record in caplog.records if "sitemap" in record.getMessage()]
    assert record.getMessage().startswith(f"sitemap {web.url('/sitemap.xml')} ")
    assert why in record.getMessage() and record.getMessage().endswith("; skipped")


def test_a_missing_sitemap_is_noted_without_a_warning(
    web: WebServer, crawler: Crawler, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="pipelines_dagster.core.crawl.site.source"):
        source, _ = site_crawl(web, crawler, Reply(status=404, body="none", content_type="text/plain"))
    assert source.sitemaps_skipped == 1
    [record] = [record for record in caplog.records if "sitemap" in record.getMessage()]
    assert record.levelno == logging.INFO
    assert record.getMessage() == f"sitemap {web.url('/sitemap.xml')} skipped: it could not be fetched: HTTP 404"
