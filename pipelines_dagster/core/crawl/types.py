"""The crawl engine's plain values: its config, what a URL's previous fetch left, and its outcome.

Apart from the engine (`crawler`), so the crawler resource and the run engine name them without
importing httpx: every run process loads them with the code location, and not every run crawls.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from pipelines_dagster.core.crawl.extract.extracted import PageKind
from pipelines_dagster.core.security.network_policy import NetworkPolicy

MiB = 1024 * 1024
CrawlStatus = Literal["success", "empty", "failed"]


@dataclass(frozen=True)
class CrawlerConfig:
    """How a crawl behaves; the defaults suit production. Timeouts and delays are in seconds.

    `total_timeout` bounds one request attempt, from sending it to the last body byte, so a
    timed-out attempt can still be retried. `max_retry_delay` caps both the exponential backoff
    and a server's Retry-After. A robots.txt Crawl-delay spaces the requests to its origin, up
    to `max_crawl_delay` seconds apart. `extract_workers` defaults to the number of usable cores;
    `extract_timeout` bounds one page's extraction, after which its worker is replaced. HTML and text pages
    are read to `max_body_bytes`, PDF and DOCX documents to `max_document_bytes`. A crawl that
    renders pages opens up to `render_pages` at once in the `chromium` browser, each within
    `render_timeout` seconds.
    """

    user_agent: str = "pipelines-dagster/0.1 (knowledge-base web crawler)"
    global_concurrency: int = 16
    per_host_concurrency: int = 4
    connect_timeout: float = 10.0
    total_timeout: float = 30.0
    max_body_bytes: int = 5 * MiB
    max_document_bytes: int = 50 * MiB
    max_attempts: int = 3
    backoff_base: float = 0.5
    backoff_factor: float = 2.0
    max_retry_delay: float = 30.0
    max_redirects: int = 5
    obey_robots: bool = True
    max_crawl_delay: float = 10.0
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    extract_workers: int | None = None
    extract_timeout: float = 60.0
    render_timeout: float = 20.0
    render_pages: int = 2
    chromium: str = "/usr/bin/chromium"

    def __post_init__(self) -> None:
        at_least = {
            "global_concurrency": 1,
            "per_host_concurrency": 1,
            "max_body_bytes": 1,
            "max_document_bytes": 1,
            "max_attempts": 1,
            "max_redirects": 0,
            "backoff_base": 0,
            "backoff_factor": 1,
            "max_retry_delay": 0,
            "max_crawl_delay": 0,
            "render_pages": 1,
        }
        for name, minimum in at_least.items():
            if getattr(self, name) < minimum:
                raise ValueError(f"{name} must be at least {minimum}, got {getattr(self, name)}")
        for name in ("connect_timeout", "total_timeout", "extract_timeout", "render_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)}")
        if self.extract_workers is not None and self.extract_workers < 1:
            raise ValueError(
                f"extract_workers must be at least 1 (or None for one per core), got {self.extract_workers}"
            )


@dataclass(frozen=True)
class PreviousFetch:
    """What the previous crawl learned about a URL, so an unchanged page is not fetched or extracted again."""

    etag: str | None = None
    last_modified: str | None = None
    raw_hash: str | None = None
    content_hash: str | None = None


@dataclass
class FetchProgress:
    """What is known about one URL so far, kept for its outcome even when it fails midway."""

    final_url: str
    attempts: int = 0
    http_status: int | None = None
    previous: PreviousFetch | None = None
    """What the last crawl left of the page the requests are for: the URL's own, or (when a source
    stores pages under their final URL) a redirect target's."""
    kind: PageKind | None = None
    """What kind of page the body is, once its type is known."""
    holds_document: bool = False
    """The URL holds one of the crawl's document slots (`fetch.DOCUMENTS_AT_ONCE`) until its outcome is made."""


@dataclass(frozen=True)
class CrawlOutcome:
    """The result for one URL.

    `error` says why a URL is `failed` or `empty` and is None on success. When `unchanged` is
    true the page is as the previous crawl left it: `content` is empty and the caller reuses the
    previous content. `raw_hash` is the sha256 of the body bytes, `content_hash` that of the
    normalized extracted text. `attempts` counts tries of the last request made for the URL;
    `fetched_at` is when its crawl started and `elapsed` how long it took, retries included.
    """

    url: str
    final_url: str
    status: CrawlStatus
    fetched_at: datetime
    elapsed: float
    attempts: int
    http_status: int | None = None
    content: str = ""
    metadata: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None
    content_hash: str | None = None
    raw_hash: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    unchanged: bool = False
    links: tuple[str, ...] = ()
    """The page's links, when the crawl asked for them (site mode); an unchanged page has none."""
    canonical: str | None = None
    rendered: bool = False
    """The text was extracted from the page as the browser rendered it (`render_seconds` long)."""
    render_seconds: float = 0.0
    kind: PageKind | None = None
    """What kind of page it is (html, text, pdf, docx); None when no body's type was known (an early
    failure, or a 304 that did not say: the previous crawl's kind then holds)."""


def distinct(urls: Iterable[str]) -> Iterator[str]:
    """Each URL once, in order."""
    seen: set[str] = set()
    for url in urls:
        if url not in seen:
            seen.add(url)
            yield url


class FetchFailed(Exception):
    """Ends one URL as `failed`; the message is the outcome's reason. `unreachable`: the server
    could not be reached or kept failing (5xx, 429, timeouts), rather than answered no."""

    def __init__(self, reason: str, *, unreachable: bool = False) -> None:
        super().__init__(reason)
        self.unreachable = unreachable


@dataclass(frozen=True)
class FetchedBody:
    """What `CrawlAccess.fetch_body` read: the body, cut at its cap when `truncated`; or, with no
    body, the `error` that says why."""

    body: bytes | None = None
    error: str | None = None
    truncated: bool = False


@dataclass(frozen=True)
class Resource:
    """A subresource fetched for a page being rendered, to hand the browser: its body is decoded,
    so `headers` no longer carry Content-Encoding or Content-Length."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class CrawlAccess(Protocol):
    """What a source may ask of the crawl before it starts, through the crawl's own guards."""

    def fetch_body(self, url: str, *, max_bytes: int) -> Awaitable[FetchedBody]:
        """The body a 200 answers at `url` with, read to `max_bytes` (decoded), or why there is none."""
        ...

    def robots_sitemaps(self, url: str) -> Awaitable[list[str]]:
        """The Sitemap: lines of the robots.txt of `url`'s origin, read once per crawl."""
        ...


class UrlSource(Protocol):
    """Where a crawl takes its URLs: a fixed list, or a site crawl's frontier that grows as pages complete."""

    @property
    def wants_links(self) -> bool:
        """Whether extraction should read each page's links (site mode)."""
        ...

    async def prepare(self, access: CrawlAccess) -> None:
        """Before the first take, on the crawl's event loop (a site crawl reads its sitemaps)."""

    def take(self, n: int) -> list[str]:
        """Up to `n` URLs to start now; empty when there are none now."""
        ...

    def done(self, outcome: CrawlOutcome) -> list[tuple[str, CrawlOutcome]]:
        """An outcome, as it completes: the outcomes to store now, each with the URL to store it under
        (none for a page the crawl already has; a site crawl may hold one back, or release some)."""
        ...

    def finish(self) -> list[tuple[str, CrawlOutcome]]:
        """When nothing is left to take or in flight: the outcomes still held back, to store now."""
        ...

    def allows(self, url: str) -> bool:
        """Whether a redirect may lead to `url`."""
        ...

    def stored_key(self, url: str) -> str | None:
        """The URL a page fetched from `url` is stored under, when the source stores pages under
        their final URL (a site crawl); None when it stores them under the URL it handed out."""
        ...

    @property
    def discovered(self) -> int | None:
        """Pages a site crawl's discovery admitted; None for a list."""
        ...

    @property
    def truncated(self) -> bool:
        """Discovery stopped at max pages (never for a list)."""
        ...

    @property
    def duplicates(self) -> int | None:
        """Pages a site crawl fetched but did not store, having them under another URL; None for a list."""
        ...

    @property
    def links_capped(self) -> int | None:
        """Pages whose links a site crawl followed only to MAX_LINKS_PER_PAGE; None for a list."""
        ...

    @property
    def sitemaps_skipped(self) -> int | None:
        """Sitemaps a site crawl found but could not read; None for a list."""
        ...

    @property
    def sitemaps_truncated(self) -> int | None:
        """Sitemaps a site crawl read only to their cap; None for a list."""
        ...


class ListSource:
    """A fixed list of URLs, each crawled once, in order; redirects may lead anywhere the guards allow."""

    wants_links = False
    discovered = None
    truncated = False
    duplicates = links_capped = sitemaps_skipped = sitemaps_truncated = None

    def __init__(self, urls: Iterable[str]) -> None:
        self._todo = distinct(urls)

    async def prepare(self, access: CrawlAccess) -> None:
        return None

    def take(self, n: int) -> list[str]:
        return list(itertools.islice(self._todo, n))

    def done(self, outcome: CrawlOutcome) -> list[tuple[str, CrawlOutcome]]:
        return [(outcome.url, outcome)]

    def finish(self) -> list[tuple[str, CrawlOutcome]]:
        return []

    def allows(self, url: str) -> bool:
        return True

    def stored_key(self, url: str) -> str | None:
        return None
