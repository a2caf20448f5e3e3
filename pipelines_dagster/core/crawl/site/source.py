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
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Generic, Protocol, TypeVar

from pipelines_dagster.core.crawl.extract.links import MAX_LINKS_PER_PAGE
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.crawl.site.frontier import Frontier, url_digest
from pipelines_dagster.core.crawl.site.scope import Scope
from pipelines_dagster.core.crawl.types import CrawlAccess
from pipelines_dagster.core.crawl.urls import normalize_url

# Pages a sitemap lists are one link away from the start URLs.
SITEMAP_DEPTH = 1
# Sitemaps read per crawl (an index and its children), and the bytes of one, decompressed: the
# sitemaps.org limit (50 MiB, 50,000 URLs), fetched under this cap rather than a page's.
MAX_SITEMAPS = 50
MAX_SITEMAP_BYTES = 50 * 1024 * 1024
# Pages held back until their rel=canonical's crawl ends, so the two can be compared.
MAX_WAITING = 100


class CrawledPage(Protocol):
    """What discovery reads of a crawl outcome (a `CrawlOutcome` is one)."""

    @property
    def url(self) -> str: ...
    @property
    def final_url(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def unchanged(self) -> bool: ...
    @property
    def links(self) -> Sequence[str]: ...
    @property
    def canonical(self) -> str | None: ...
    @property
    def content_hash(self) -> str | None: ...


P = TypeVar("P", bound=CrawledPage)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Discovered:
    """A page's contribution to discovery, for callers without a crawl outcome (tests, tools)."""

    url: str
    final_url: str = ""
    status: str = "success"
    unchanged: bool = False
    links: Sequence[str] = ()
    canonical: str | None = None
    content_hash: str | None = None

    def __post_init__(self) -> None:
        if not self.final_url:
            object.__setattr__(self, "final_url", self.url)


class SiteSource(Generic[P]):
    """The URLs of a site crawl, handed out in breadth-first order as the crawl asks for them: the
    crawler's `UrlSource` in site mode.

    Each page is stored once, under its normalized final URL: a page reached again (through a
    redirect, or linked under its final URL as well) is a duplicate, not stored again. A page whose
    `rel=canonical` names another page in scope is dropped as a duplicate when that page's text is
    the same; when it differs the canonical is taken for a mistake and both are stored, so a site
    that declares one canonical for every page loses none of them. Until its canonical's crawl
    ends, such a page waits here (at most MAX_WAITING of them; past that they are stored at once).
    """

    wants_links = True

    def __init__(
        self,
        config: SiteConfig,
        frontier: Frontier,
        *,
        stored_links: Callable[[str], Sequence[str]] = lambda url: (),
        warn: Callable[[str], None] | None = None,
    ) -> None:
        """`warn` is told of what the crawl could not read whole (a sitemap skipped or cut, a page's links
        capped): the run's log, where its user looks; this module's logger without one."""
        self.config = config
        self._warn = warn or logger.warning
        self.scope = Scope.of(config)
        self.out_of_scope = 0
        """Discovered URLs refused for scope (another host, an excluded path, not http(s))."""
        self.duplicates = 0
        """Pages fetched but not stored: another URL of the crawl already had them."""
        self.sitemaps_read = 0
        self.sitemaps_skipped = 0
        """Sitemaps found but not read (not there, not a sitemap), each logged with why."""
        self.sitemaps_truncated = 0
        """Sitemaps longer than MAX_SITEMAP_BYTES, read to there (one cut at max pages is not counted:
        `truncated` tells that discovery stopped at max pages)."""
        self.links_capped = 0
        """Pages whose links reached MAX_LINKS_PER_PAGE: the links past it were not followed."""
        self._frontier = frontier
        self._stored_links = stored_links
        self._in_flight: dict[str, int] = {}
        # Digests of the URLs whose crawl has ended, and of the pages stored, with their text's hash.
        self._ended: set[int] = set()
        self._stored: dict[int, str | None] = {}
        # Pages waiting for their canonical's crawl to end, with their depth, by the canonical's digest.
        self._waiting: dict[int, list[tuple[P, int]]] = {}
        self._waiting_count = 0
        # The start URLs are fetched whatever the include and exclude patterns say (as Firecrawl and Scrapy
        # do): the patterns choose which discovered pages are crawled, and discovery starts from these.
        for url in config.start_urls:
            self._admit(url, 0, start=True)

    @property
    def truncated(self) -> bool:
        """Discovery stopped at max pages: pages past the limit were not looked for."""
        return self._frontier.truncated

    @property
    def discovered(self) -> int:
        return self._frontier.admitted

    async def prepare(self, access: CrawlAccess) -> None:
        """Read the site's sitemaps (those robots.txt names, and /sitemap.xml) and admit their pages.

        Only sitemaps on the site's own hosts are fetched: nothing off the site is requested. A
        sitemap that cannot be fetched or read is skipped, and one longer than MAX_SITEMAP_BYTES
        read to there; either is logged with why, and counted in `sitemaps_skipped` or
        `sitemaps_truncated`. Links still find the pages.
        """
        from pipelines_dagster.core.crawl.site.sitemaps import SitemapError, parse_sitemap, sitemap_candidates

        todo: list[str] = []
        for start in self.config.start_urls:
            todo += sitemap_candidates(start, await access.robots_sitemaps(start))
        seen: set[str] = set()
        while todo and self.sitemaps_read < MAX_SITEMAPS:
            url = todo.pop(0)
            if url in seen or not self.scope.on_site(url):
                continue
            seen.add(url)
            # A byte past the cap, so the parser, which reads to the cap, sees that the sitemap goes on.
            fetched = await access.fetch_body(url, max_bytes=MAX_SITEMAP_BYTES + 1)
            if fetched.body is None:
                # Most often a site without one at /sitemap.xml: worth a line, not a warning.
                self.sitemaps_skipped += 1
                logger.info("sitemap %s skipped: it could not be fetched: %s", url, fetched.error)
                continue
            # Off the event loop: a large sitemap is seconds of parsing.
            parse = partial(
                parse_sitemap, fetched.body, base_url=url, max_urls=self.config.max_pages, max_bytes=MAX_SITEMAP_BYTES
            )
            try:
                sitemap = await asyncio.to_thread(parse)
            except SitemapError as exc:
                self.sitemaps_skipped += 1
                self._warn(f"{exc}; skipped")
                continue
            finally:
                del fetched, parse  # the body, up to MAX_SITEMAP_BYTES: not kept while the next is fetched
            self.sitemaps_read += 1
            # Cut short of max pages' entries, so by its size: a cut at max pages is the usual case of a large
            # site, told by discovery's own `truncated`, and not worth a warning on every run.
            if sitemap.truncated and len(sitemap.urls) + len(sitemap.sitemaps) < self.config.max_pages:
                self.sitemaps_truncated += 1
                self._warn(
                    f"sitemap {url} lists more than was read (at most {MAX_SITEMAP_BYTES} bytes); the entries "
                    "before the cut are crawled"
                )
            todo += sitemap.sitemaps
            self.add_sitemap_urls(entry.loc for entry in sitemap.urls)

    def add_sitemap_urls(self, urls: Iterable[str]) -> int:
        """Admit the pages a sitemap lists; how many were new and in scope."""
        return sum(self._admit(url, SITEMAP_DEPTH) for url in urls)

    def take(self, n: int) -> list[str]:
        """Up to `n` URLs to fetch next, shallowest first; empty when none is waiting now (pages in
        flight may still add more). A URL whose page the crawl already stored is skipped."""
        while True:
            batch = self._frontier.pop_batch(n)
            fresh = [(url, depth) for url, depth in batch if url_digest(url) not in self._stored]
            if fresh or not batch:
                break
        self._in_flight.update(fresh)
        return [url for url, _ in fresh]

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def allows(self, url: str) -> bool:
        """Whether a redirect may lead to `url`: only inside the crawl's scope."""
        return self.scope.allows(url)

    def done(self, page: P) -> list[tuple[str, P]]:
        """A taken URL's crawl ended: admit what its page links to, one level deeper, and say what to
        store now, each as (the URL to store it under, the page): none for a duplicate, or a page
        waiting for its canonical; more than one when pages waited for this one."""
        depth = self._in_flight.pop(page.url, 0)
        self._ended.add(url_digest(page.url))
        if page.status != "success":
            return [(page.url, page), *self._release(page.url, None)]
        key = self._key(page)
        if url_digest(key) in self._stored:
            self.duplicates += 1
            return []
        canonical = self._normalized(page.canonical)
        if canonical is not None and canonical != key and self.scope.allows(canonical):
            wait = self._compare_with(canonical, page, depth)
            if wait is None:
                self.duplicates += 1
            if wait is not False:
                return []
        self._store(key, page, depth)
        ready = [(key, page), *self._release(key, page.content_hash)]
        return ready + self._release(page.url, page.content_hash) if page.url != key else ready

    def finish(self) -> list[tuple[str, P]]:
        """The pages still waiting when the crawl has nothing left: their canonical never ended in a
        page to compare with, so each is stored under its own URL."""
        waiting = [entry for entries in self._waiting.values() for entry in entries]
        self._waiting.clear()
        self._waiting_count = 0
        return self._stored_now(waiting, None)

    def _compare_with(self, canonical: str, page: P, depth: int) -> bool | None:
        """Whether `page` (at `depth`) waits for its canonical (True), is its duplicate (None), or is
        stored now (False: the canonical has other text, ended without a page, or cannot be waited for)."""
        digest = url_digest(canonical)
        if digest in self._stored:
            return None if self._stored[digest] == page.content_hash else False
        if digest in self._ended or self._waiting_count >= MAX_WAITING:
            return False
        if not self._frontier.has(canonical) and not self._admit(canonical, depth + 1):
            return False
        self._waiting.setdefault(digest, []).append((page, depth))
        self._waiting_count += 1
        return True

    def stored_key(self, url: str) -> str | None:
        """The URL a page fetched from `url` (as its final URL) is stored under."""
        return self._normalized(url)

    def _key(self, page: P) -> str:
        """The URL a page is stored under: its final URL, normalized as discovery normalizes links."""
        return self._normalized(page.final_url) or page.url

    def _store(self, key: str, page: P, depth: int) -> None:
        digest = url_digest(key)
        self._stored[digest] = page.content_hash
        self._ended.add(digest)
        # Not fetched again when linked later: the crawl has the page under this URL.
        self._frontier.mark_seen(key)
        if depth >= self.config.max_depth:
            return
        if not page.unchanged and len(page.links) >= MAX_LINKS_PER_PAGE:
            self.links_capped += 1
            self._warn(
                f"page {key} has {MAX_LINKS_PER_PAGE} links or more; only the first {MAX_LINKS_PER_PAGE} are followed"
            )
        for link in self._stored_links(page.url) if page.unchanged else page.links:
            self._admit(link, depth + 1)

    def _release(self, url: str, content_hash: str | None) -> list[tuple[str, P]]:
        """The pages that waited for `url`, now that its crawl ended with `content_hash` (None:
        without a page)."""
        waiting = self._waiting.pop(url_digest(url), [])
        self._waiting_count -= len(waiting)
        return self._stored_now(waiting, content_hash)

    def _stored_now(self, waiting: list[tuple[P, int]], content_hash: str | None) -> list[tuple[str, P]]:
        """Pages done waiting for a canonical that ended with `content_hash`: those with the same
        text are its duplicates, the others are stored."""
        ready: list[tuple[str, P]] = []
        for page, depth in waiting:
            key = self._key(page)
            if (content_hash is not None and page.content_hash == content_hash) or url_digest(key) in self._stored:
                self.duplicates += 1
                continue
            self._store(key, page, depth)
            ready.append((key, page))
        return ready

    def _normalized(self, url: str | None) -> str | None:
        if url is None:
            return None
        return normalize_url(
            url, drop_query_params=self.config.drop_query_params, drop_all_query=self.config.drop_all_query
        )

    def _admit(self, url: str, depth: int, *, start: bool = False) -> bool:
        """Queue a URL found `depth` links from a start URL, if it is in scope; a `start` URL only needs to be
        on the site (include and exclude do not apply to it)."""
        # Most links of a page are links every page has (navigation): one already admitted is in
        # its normalized form, so it is refused before it is normalized again.
        if self._frontier.has(url):
            return False
        normalized = self._normalized(url)
        in_scope = self.scope.on_site if start else self.scope.allows
        if normalized is None or not in_scope(normalized):
            self.out_of_scope += 1
            return False
        return self._frontier.add(normalized, depth)
