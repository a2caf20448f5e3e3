"""The crawl record: the JSON line a crawl stores for each URL, written and read only through here.

The run engine writes one per URL into the crawl's blob; the KB index, the page-change timeline,
the next crawl's conditional GETs and the checks read them back as `CrawlRecord`s, so a renamed
or retyped field is a change to this module and a type error everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, get_args

from pipelines_dagster.core.crawl.extract.extracted import PAGE_KINDS, PageKind
from pipelines_dagster.core.crawl.types import CrawlOutcome, CrawlStatus
from pipelines_dagster.core.storage.blob import BlobStore

STATUSES: frozenset[str] = frozenset(get_args(CrawlStatus))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredPage:
    """What a stored record of an unchanged page carries forward into the next crawl's record."""

    content: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)
    canonical: str | None = None
    kind: PageKind | None = None


class CrawlRecordError(ValueError):
    """A stored line that is not a crawl record; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlRecord:
    """One URL of a crawl as stored. `content` and `metadata` of an unchanged page are the previous
    crawl's, carried forward; `error` says why a URL is `failed` or `empty`."""

    url: str
    status: CrawlStatus
    final_url: str | None = None
    content: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    http_status: int | None = None
    content_hash: str | None = None
    raw_hash: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    unchanged: bool = False
    attempts: int = 1
    elapsed_seconds: float = 0.0
    fetched_at: str | None = None
    """ISO 8601, when the URL's crawl started."""
    links: list[str] = field(default_factory=list)
    """A site crawl's discovered links of the page (carried forward when unchanged, like content)."""
    canonical: str | None = None
    rendered: bool = False
    """This crawl read the page's text from the page as the browser rendered it, in `render_seconds` (an
    unchanged page is not rendered again: it carries the text its last rendering gave)."""
    render_seconds: float = 0.0
    kind: PageKind | None = None
    """What kind of page it was: html, text, pdf or docx; None when the crawl failed before it knew. A line
    an older release wrote has none: it crawled only HTML, XHTML and plain text, and reads as html."""

    @property
    def succeeded(self) -> bool:
        return self.status == "success"

    @classmethod
    def of_outcome(cls, outcome: CrawlOutcome, *, previous: StoredPage | None = None) -> CrawlRecord:
        """The record of a crawled URL; `previous` is what an unchanged page carries forward."""
        kind = outcome.kind
        if outcome.unchanged:
            kept = previous or StoredPage()
            content, metadata, links, canonical = kept.content, kept.metadata, kept.links, kept.canonical
            # A 304 need not say what the page is: it is what it was.
            kind = kind or kept.kind
        else:
            content, metadata = outcome.content, dict(outcome.metadata)
            links, canonical = list(outcome.links), outcome.canonical
        return cls(
            url=outcome.url,
            final_url=outcome.final_url,
            status=outcome.status,
            content=content,
            metadata=metadata,
            error=outcome.error,
            http_status=outcome.http_status,
            content_hash=outcome.content_hash,
            raw_hash=outcome.raw_hash,
            etag=outcome.etag,
            last_modified=outcome.last_modified,
            unchanged=outcome.unchanged,
            attempts=outcome.attempts,
            elapsed_seconds=round(outcome.elapsed, 3),
            fetched_at=outcome.fetched_at.isoformat(),
            links=links,
            canonical=canonical,
            rendered=outcome.rendered,
            render_seconds=round(outcome.render_seconds, 3),
            kind=kind,
        )

    def outcome(self) -> CrawlOutcome:
        """The outcome this record was stored from, as a crawl that resumes replays it."""
        return CrawlOutcome(
            url=self.url,
            final_url=self.final_url or self.url,
            status=self.status,
            fetched_at=datetime.fromisoformat(self.fetched_at) if self.fetched_at else datetime.now(UTC),
            elapsed=self.elapsed_seconds,
            attempts=self.attempts,
            http_status=self.http_status,
            content=self.content,
            metadata=dict(self.metadata),
            error=self.error,
            content_hash=self.content_hash,
            raw_hash=self.raw_hash,
            etag=self.etag,
            last_modified=self.last_modified,
            unchanged=self.unchanged,
            links=tuple(self.links),
            canonical=self.canonical,
            rendered=self.rendered,
            render_seconds=self.render_seconds,
            kind=self.kind,
        )

    @classmethod
    def read(cls, line: Mapping[str, Any]) -> CrawlRecord:
        """A stored line as a record; fields an older release did not write take their defaults."""
        url, status = line.get("url"), line.get("status")
        if not isinstance(url, str) or not url:
            raise CrawlRecordError(f"a crawl record needs a 'url' string, got {url!r}")
        if status not in STATUSES:
            raise CrawlRecordError(f"crawl record of {url}: 'status' must be one of {sorted(STATUSES)}, got {status!r}")
        values = {name: line[name] for name in _OPTIONAL if line.get(name) is not None}
        if "kind" not in line and status != "failed":
            values["kind"] = "html"
        elif values.get("kind") not in PAGE_KINDS:
            values.pop("kind", None)  # a kind a later release added: not one this one can name
        return cls(url=url, status=status, **values)


_OPTIONAL = tuple(f.name for f in fields(CrawlRecord) if f.name not in ("url", "status"))


def write_crawl(store: BlobStore, key: str, records: Iterable[CrawlRecord]) -> int:
    """Store a crawl's records, one JSON line each (orjson encodes the dataclass); the byte count."""
    return store.write_jsonl(key, records)


def read_crawl(store: BlobStore, key: str) -> Iterator[CrawlRecord]:
    """A stored crawl's records, a chunk at a time; BlobNotFoundError when absent, CrawlRecordError on a bad line."""
    return map(CrawlRecord.read, store.read_jsonl(key))
