"""What a crawl did, counted as it goes: its report (what the run's metadata shows) and its progress."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pipelines_dagster.core.crawl.extract.extracted import DOCUMENT_KINDS, PageKind
from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.crawl.throttle import Limit, describe_limits

FAILED_URLS_SHOWN = 20


@dataclass(kw_only=True)
class CrawlReport:
    blob_key: str
    blob_url: str
    attempted: int = 0
    succeeded: int = 0
    empty: int = 0
    failed: int = 0
    unchanged: int = 0
    bytes_written: int = 0
    charged_micros: int = 0
    newly_charged: bool = False
    duration_seconds: float = 0.0
    crawl_seconds: float = 0.0
    """From the crawl's start to its last page: its duration without the wait for locks and credit."""
    failed_urls: list[tuple[str, str]] = field(default_factory=list)
    """(url, reason) of the first FAILED_URLS_SHOWN URLs that did not succeed."""
    pages_discovered: int | None = None
    """A site crawl's pages admitted by discovery; None for a list crawl."""
    discovery_truncated: bool = False
    """A site crawl stopped discovering at max pages: its absences say nothing about the site."""
    pages_duplicate: int | None = None
    """A site crawl's pages fetched but not stored: redirects to, and canonical copies of, stored pages."""
    pages_links_capped: int | None = None
    """A site crawl's pages whose links were followed only to MAX_LINKS_PER_PAGE."""
    sitemaps_skipped: int | None = None
    """A site crawl's sitemaps found but not read (not there, not a sitemap)."""
    sitemaps_truncated: int | None = None
    """A site crawl's sitemaps longer than their cap (50 MiB), read to it."""
    start_urls: frozenset[str] = frozenset()
    """A site crawl's start URLs, as its records name them; empty for a list crawl."""
    resumed: int = 0
    """Pages an earlier run of the same crawl stored in its checkpoint, replayed, not fetched again."""
    start_urls_failed: int = 0
    """A site crawl's start URLs that failed: all of them, and discovery had nowhere to go (`crawl_health`)."""
    limits: tuple[Limit, ...] = ()
    """What limited the crawl's rate (a Crawl-delay, the shared host budget, concurrency), the longest wait first."""
    rendered: int = 0
    """Pages whose text this crawl read from the page as the browser rendered it."""
    render_seconds: float = 0.0
    """The time those pages took to render, summed (pages render side by side, so it may pass the crawl's)."""
    kinds: Counter[PageKind] = field(default_factory=Counter)
    """Pages by kind (html, text, pdf, docx), whatever their status; a page that failed before its type was known
    has none and is not counted."""
    documents_failed: int = 0
    """PDF and DOCX pages that failed or had no text."""

    def count(self, record: CrawlRecord) -> None:
        self.attempted += 1
        self.rendered += record.rendered
        self.render_seconds += record.render_seconds
        if record.kind is not None:
            self.kinds[record.kind] += 1
            self.documents_failed += record.kind in DOCUMENT_KINDS and not record.succeeded
        if record.succeeded:
            self.succeeded += 1
            self.unchanged += record.unchanged
            return
        if record.status == "empty":
            self.empty += 1
        else:
            self.failed += 1
            self.start_urls_failed += record.url in self.start_urls
        if len(self.failed_urls) < FAILED_URLS_SHOWN:
            self.failed_urls.append((record.url, record.error or record.status))

    @property
    def pages_per_second(self) -> float:
        """Pages fetched (not replayed from a checkpoint) per second of the crawl."""
        return _rate(self.attempted - self.resumed, self.crawl_seconds)

    def summary(self) -> str:
        """The crawl in one sentence: its counts, its rate and what limited it."""
        return (
            f"{self.attempted} attempted, {self.succeeded} succeeded, {self.empty} empty, {self.failed} failed in "
            f"{self.crawl_seconds:.1f} s of crawling ({self.pages_per_second:.1f} pages/s); {self._documents()}"
            f"{self._rendering()}"
            f"{_limited_by(self.limits)}"
        )

    def _documents(self) -> str:
        counts = [f"{self.kinds[kind]} {kind.upper()}" for kind in sorted(DOCUMENT_KINDS) if self.kinds[kind]]
        if not counts:
            return ""
        total = sum(self.kinds[kind] for kind in DOCUMENT_KINDS)
        failed = f", {self.documents_failed} of them failed" if self.documents_failed else ""
        return f"{total} {'document' if total == 1 else 'documents'} ({', '.join(counts)}){failed}; "

    def _rendering(self) -> str:
        if not self.rendered:
            return ""
        pages = "page" if self.rendered == 1 else "pages"
        return f"{self.rendered} {pages} rendered in a browser ({self.render_seconds:.1f} s of rendering); "


@dataclass(frozen=True, kw_only=True)
class CrawlProgress:
    """How far a crawl has got: pages done (succeeded, empty and failed) of its total, after `elapsed_seconds`.

    The total is a list's URLs, or the pages a site crawl discovered so far (it may find more)."""

    done: int
    total: int
    failed: int
    elapsed_seconds: float
    succeeded: int = 0
    empty: int = 0
    resumed: int = 0
    """Pages replayed from an earlier run's checkpoint, not fetched: they do not count towards the rate."""
    limits: tuple[Limit, ...] = ()

    @property
    def pages_per_second(self) -> float:
        return _rate(self.done - self.resumed, self.elapsed_seconds)

    @property
    def eta_seconds(self) -> float | None:
        """Seconds until the total is done at the rate so far; None before there is a rate."""
        left = max(self.total - self.done, 0)
        if not left:
            return 0.0
        rate = self.pages_per_second
        return left / rate if rate > 0 else None

    @property
    def limited_by(self) -> str | None:
        return describe_limits(self.limits)

    def __str__(self) -> str:
        eta, named = self.eta_seconds, self.limited_by
        left = f", about {duration(eta)} left" if eta else ""
        limited = f"; rate limited by {named}" if named else ""
        return (
            f"crawled {self.done} of {self.total} pages, {self.failed} failed, {self.pages_per_second:.1f} pages/s"
            f"{left}{limited}"
        )


def _rate(pages: int, seconds: float) -> float:
    return pages / seconds if seconds > 0 else 0.0


def _limited_by(limits: tuple[Limit, ...]) -> str:
    named = describe_limits(limits)
    return f"rate limited by {named}" if named else "no limit held requests back"


def duration(seconds: float) -> str:
    """`seconds` as a person reads it: 42 s, 3 min 5 s, 2 h 10 min."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
