"""What a site crawl fetches next: start URLs, then the pages sitemaps list and crawled pages link to.

`SiteSource` is the crawl's URL source in `site` mode. It admits URLs to a `Frontier` (breadth-first,
bounded by depth and max pages, spooled to disk) after normalizing them (the config's query
parameters dropped) and checking them against the crawl's `Scope`; the crawl takes batches from
it and reports each outcome back, so a page's links join the frontier one level deeper. An
unchanged page (a 304, or the same bytes) is not parsed again: its links are the ones the previous
crawl stored. The crawler still applies the SSRF guard and robots.txt to every URL it is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol
from urllib.parse import urlsplit

from pipelines_dagster.core.frontier import Frontier
from pipelines_dagster.core.site_config import SiteConfig
from pipelines_dagster.core.urls import Scope, normalize_url

# Pages a sitemap lists are one link away from the start URLs.
SITEMAP_DEPTH = 1
# Sitemaps read per crawl (an index and its children), and the bytes of one, decompressed.
MAX_SITEMAPS = 50
MAX_SITEMAP_BYTES = 50 * 1024 * 1024
ROBOTS_MAX_BYTES = 512 * 1024


class CrawledPage(Protocol):
    """What discovery reads of a crawl outcome (a `CrawlOutcome` is one)."""

    @property
    def url(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def unchanged(self) -> bool: ...
    @property
    def links(self) -> Sequence[str]: ...
    @property
    def canonical(self) -> str | None: ...


@dataclass(frozen=True, kw_only=True)
class Discovered:
    """A page's contribution to discovery, for callers without a crawl outcome (tests, tools)."""

    url: str
    status: str = "success"
    unchanged: bool = False
    links: Sequence[str] = ()
    canonical: str | None = None


class Fetcher(Protocol):
    """The crawl's own fetching, through its SSRF guard, robots.txt and body caps."""

    def __call__(self, url: str, *, max_bytes: int) -> Awaitable[bytes | None]: ...


class SiteSource:
    """The URLs of a site crawl, handed out in breadth-first order as the crawl asks for them: the
    crawler's `UrlSource` in site mode."""

    wants_links = True

    def __init__(
        self,
        config: SiteConfig,
        frontier: Frontier,
        *,
        stored_links: Callable[[str], Sequence[str]] = lambda url: (),
    ) -> None:
        self.config = config
        self.scope = Scope.of(config)
        self.out_of_scope = 0
        """Discovered URLs refused for scope (another host, an excluded path, not http(s))."""
        self.sitemaps_read = 0
        self._frontier = frontier
        self._stored_links = stored_links
        self._in_flight: dict[str, int] = {}
        for url in config.start_urls:
            self._admit(url, 0)

    @property
    def truncated(self) -> bool:
        """Discovery stopped at max pages: pages past the limit were not looked for."""
        return self._frontier.truncated

    @property
    def discovered(self) -> int:
        return self._frontier.admitted

    async def prepare(self, fetch_body: Fetcher) -> None:
        """Read the site's sitemaps (those robots.txt names, and /sitemap.xml) and admit their pages.

        Only sitemaps on the site's own hosts are fetched: nothing off the site is requested. A
        sitemap that cannot be fetched or read is skipped; links still find the pages.
        """
        from protego import Protego

        from pipelines_dagster.core.sitemaps import SitemapError, parse_sitemap, sitemap_candidates

        todo: list[str] = []
        for start in self.config.start_urls:
            robots = await fetch_body(_robots_url(start), max_bytes=ROBOTS_MAX_BYTES)
            named = Protego.parse(robots.decode("utf-8", "replace")).sitemaps if robots else ()
            todo += sitemap_candidates(start, named)
        seen: set[str] = set()
        while todo and self.sitemaps_read < MAX_SITEMAPS:
            url = todo.pop(0)
            if url in seen or not self.scope.on_site(url):
                continue
            seen.add(url)
            body = await fetch_body(url, max_bytes=MAX_SITEMAP_BYTES)
            if body is None:
                continue
            # Off the event loop: a large sitemap is seconds of parsing.
            parse = partial(
                parse_sitemap, body, base_url=url, max_urls=self.config.max_pages, max_bytes=MAX_SITEMAP_BYTES
            )
            try:
                sitemap = await asyncio.to_thread(parse)
            except SitemapError:
                continue
            self.sitemaps_read += 1
            todo += sitemap.sitemaps
            self.add_sitemap_urls(entry.loc for entry in sitemap.urls)

    def add_sitemap_urls(self, urls: Iterable[str]) -> int:
        """Admit the pages a sitemap lists; how many were new and in scope."""
        return sum(self._admit(url, SITEMAP_DEPTH) for url in urls)

    def take(self, n: int) -> list[str]:
        """Up to `n` URLs to fetch next, shallowest first; empty when none is waiting now (pages in
        flight may still add more)."""
        batch = self._frontier.pop_batch(n)
        self._in_flight.update(batch)
        return [url for url, _ in batch]

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def allows(self, url: str) -> bool:
        """Whether a redirect may lead to `url`: only inside the crawl's scope."""
        return self.scope.allows(url)

    def done(self, page: CrawledPage) -> None:
        """A taken URL's crawl ended: admit what its page links to, one level deeper."""
        depth = self._in_flight.pop(page.url, 0)
        if page.status != "success" or depth >= self.config.max_depth:
            return
        links = self._stored_links(page.url) if page.unchanged else page.links
        for link in (page.canonical, *links) if page.canonical else links:
            self._admit(link, depth + 1)

    def _admit(self, url: str, depth: int) -> bool:
        normalized = normalize_url(
            url, drop_query_params=self.config.drop_query_params, drop_all_query=self.config.drop_all_query
        )
        if normalized is None or not self.scope.allows(normalized):
            self.out_of_scope += 1
            return False
        return self._frontier.add(normalized, depth)


def _robots_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"
