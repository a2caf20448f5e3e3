"""What a crawl did, counted as it goes: its report (what the run's metadata shows) and its progress."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines_dagster.core.crawl.record import CrawlRecord

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

    def count(self, record: CrawlRecord) -> None:
        self.attempted += 1
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


@dataclass(frozen=True, kw_only=True)
class CrawlProgress:
    """How far a crawl has got: pages done (failed among them) of its total, after `elapsed_seconds`."""

    done: int
    total: int
    failed: int
    elapsed_seconds: float

    @property
    def pages_per_second(self) -> float:
        return self.done / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def __str__(self) -> str:
        return f"crawled {self.done} of {self.total} pages, {self.failed} failed, {self.pages_per_second:.1f} pages/s"
