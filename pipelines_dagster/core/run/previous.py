"""What a crawl builds on: the pipeline's last stored crawl (validators, hashes and unchanged pages'
content) and a stopped run's checkpoint to resume from, both spooled to disk so memory stays flat."""

from __future__ import annotations

import mmap
import tempfile
from collections.abc import Iterable, Iterator

import orjson

from pipelines_dagster.core.crawl.record import CrawlRecord, StoredPage, read_crawl
from pipelines_dagster.core.crawl.render.rule import RenderMemory
from pipelines_dagster.core.crawl.types import CrawlOutcome, PreviousFetch
from pipelines_dagster.core.storage.blob import BlobNotFoundError, BlobStore

# Linux maps the pages around a faulting one, in aligned windows of this size (fault_around_bytes).
_FAULT_WINDOW = 64 * 1024


class _Spool:
    """Byte strings by URL in a temporary file, read back through a memory map: a lookup never gives
    up the GIL (reads that do, SQLite's or a file's, queued behind the crawl's thread at every page),
    and what a read mapped is let go at once, so memory stays flat however large the spool is (the
    file stays in the page cache)."""

    def __init__(self, items: Iterable[tuple[str, bytes]], *, prefix: str) -> None:
        self._spans: dict[str, tuple[int, int]] = {}
        # Deleted when closed, or by the system if the process dies first.
        self._file = tempfile.TemporaryFile(prefix=prefix)  # noqa: SIM115 (closed by close())
        for url, stored in items:
            self._spans[url] = (self._file.tell(), len(stored))
            self._file.write(stored)
        self._file.flush()
        size = self._file.tell()
        self._map = mmap.mmap(self._file.fileno(), size, access=mmap.ACCESS_READ) if size else None

    def __len__(self) -> int:
        return len(self._spans)

    def get(self, url: str) -> bytes | None:
        span = self._spans.get(url)
        if span is None or self._map is None:
            return None
        offset, length = span
        stored = self._map[offset : offset + length]
        # Each entry is read once. The kernel maps a fault's whole aligned window, so the whole window goes.
        start = offset - offset % _FAULT_WINDOW
        end = min(len(self._map), -(-(offset + length) // _FAULT_WINDOW) * _FAULT_WINDOW)
        self._map.madvise(mmap.MADV_DONTNEED, start, end - start)
        return stored

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._file.close()


class PreviousCrawl:
    """The pipeline's last stored crawl, spooled to a temporary file.

    Gives the crawler each URL's validators and hashes, and gives back an unchanged page's stored
    content and metadata, without holding the old crawl in memory: only each URL's place in the
    file is kept. With a `render_memory`, what each page fetched anew needed is told to it.
    """

    def __init__(
        self, records: Iterable[CrawlRecord] | None = None, *, render_memory: RenderMemory | None = None
    ) -> None:
        self.hints: dict[str, PreviousFetch] = {}

        def successes() -> Iterator[tuple[str, bytes]]:
            for record in records or ():
                if render_memory is not None and not record.unchanged and record.status != "failed":
                    # What each page fetched anew needed, in crawl order: the memory settles as that crawl did.
                    render_memory.record(record.final_url or record.url, needed=record.rendered)
                if not record.succeeded:
                    continue
                self.hints[record.url] = PreviousFetch(
                    etag=record.etag,
                    last_modified=record.last_modified,
                    raw_hash=record.raw_hash,
                    content_hash=record.content_hash,
                )
                yield (
                    record.url,
                    orjson.dumps([record.content, record.metadata, record.links, record.canonical, record.kind]),
                )

        self._spool = _Spool(successes(), prefix="previous-crawl-")

    def stored(self, url: str) -> StoredPage | None:
        """What the previous crawl stored for `url`; None when it has no success for it."""
        stored = self._spool.get(url)
        if stored is None:
            return None
        content, metadata, links, canonical, kind = orjson.loads(stored)
        return StoredPage(content=content, metadata=metadata, links=links, canonical=canonical, kind=kind)

    def close(self) -> None:
        self._spool.close()


class ResumedCrawl:
    """The records an earlier run of the same crawl stored in its checkpoint, spooled like the
    previous crawl: the crawl replays them instead of fetching their URLs, and stores them as they were."""

    def __init__(self, records: Iterable[CrawlRecord]) -> None:
        self._spool = _Spool(((record.url, orjson.dumps(record)) for record in records), prefix="resumed-crawl-")
        self._replayed: dict[int, CrawlRecord] = {}

    def __len__(self) -> int:
        return len(self._spool)

    def replay(self, url: str) -> CrawlOutcome | None:
        """The stored outcome of `url`, once; None when the earlier runs did not store it."""
        stored = self._spool.get(url)
        if stored is None:
            return None
        record = CrawlRecord.read(orjson.loads(stored))
        outcome = record.outcome()
        self._replayed[id(outcome)] = record
        return outcome

    def record_of(self, outcome: CrawlOutcome) -> CrawlRecord | None:
        """The stored record `outcome` was replayed from; None for an outcome this run fetched."""
        record = self._replayed.pop(id(outcome), None)
        # An outcome the crawler stored under another URL is a new object; the id may be reused.
        return record if record is not None and record.url == outcome.url else None

    def close(self) -> None:
        self._replayed.clear()
        self._spool.close()


def outcome_record(outcome: CrawlOutcome, previous: PreviousCrawl) -> CrawlRecord:
    """The record stored for one URL; an unchanged page carries its previous content forward."""
    return CrawlRecord.of_outcome(outcome, previous=previous.stored(outcome.url) if outcome.unchanged else None)


def stored_records(blob_store: BlobStore, key: str | None) -> Iterator[CrawlRecord] | None:
    """A stored crawl's records; None when there is none (first crawl, or pruned by retention)."""
    if key is None:
        return None
    try:
        return read_crawl(blob_store, key)
    except BlobNotFoundError:
        return None
