"""A crawl's checkpoint: the records a run has crawled so far, stored as it goes, so the run that
continues a stopped one (past its maximum runtime, its process killed) crawls only what is left.

A checkpoint belongs to a pipeline's crawl as a chain of runs: Dagster's retry of a failed run
carries the first run's id as its root, and every run of the chain writes under it. Records are
stored in numbered chunks (`checkpoints/{workspace}/{pipeline}/{root run}/{n}.{run}.jsonl`), one
written every CHECKPOINT_EVERY_SECONDS or CHECKPOINT_EVERY_RECORDS, and once more when the run is
interrupted; each chunk is a whole blob write, so a chunk is there complete or not at all. The
chain's last run stores the whole crawl as its result and clears the checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from pipelines_dagster.core.crawl.record import CrawlRecord, read_crawl, write_crawl
from pipelines_dagster.core.storage.blob import BlobNotFoundError, BlobStore, InvalidBlobKeyError, segment_problem

CHECKPOINT_EVERY_SECONDS = 10.0
CHECKPOINT_EVERY_RECORDS = 500


def checkpoint_prefix(*, workspace_id: int, pipeline_id: int, root_run_id: str) -> str:
    if (problem := segment_problem(root_run_id)) is not None:
        raise InvalidBlobKeyError(f"run id {root_run_id!r} cannot be used in a blob key: it {problem}.")
    return f"checkpoints/{workspace_id}/{pipeline_id}/{root_run_id}/"


class Checkpoint:
    """The stored records of one crawl chain, and the writer of `run_id`'s share of them."""

    def __init__(
        self,
        store: BlobStore,
        prefix: str,
        run_id: str,
        *,
        every_seconds: float = CHECKPOINT_EVERY_SECONDS,
        every_records: int = CHECKPOINT_EVERY_RECORDS,
    ) -> None:
        self._store = store
        self._prefix = prefix
        self._run_id = run_id
        self._every_seconds = every_seconds
        self._every_records = every_records
        self._chunks = [info.key for info in store.list(prefix) if info.key.endswith(".jsonl")]
        self._buffer: list[CrawlRecord] = []
        self._due = time.monotonic() + every_seconds
        self.written = 0
        """Records this run has stored in the checkpoint."""

    @property
    def writers(self) -> list[str]:
        """The runs that stored chunks before this one started, in the order they wrote them."""
        runs: list[str] = []
        for key in self._chunks:
            run = key.removeprefix(self._prefix).split(".")[1]
            if run not in runs:
                runs.append(run)
        return runs

    def stalled(self, *, parent_run_id: str | None, root_run_id: str) -> bool:
        """Whether the run this one continues was itself a continuation that stored nothing before it
        stopped: the crawl makes no progress (every page it reaches stops its process, say)."""
        return parent_run_id not in (None, root_run_id) and parent_run_id not in self.writers

    def records(self) -> Iterator[CrawlRecord]:
        """What the chain's earlier runs stored, chunk by chunk."""
        for key in self._chunks:
            try:
                yield from read_crawl(self._store, key)
            except BlobNotFoundError:
                continue  # cleared meanwhile by a run that finished the crawl

    def add(self, record: CrawlRecord) -> None:
        """Keep a record crawled by this run; a chunk is stored once enough are kept or enough time passed."""
        self._buffer.append(record)
        if len(self._buffer) >= self._every_records or time.monotonic() >= self._due:
            self.flush()

    def flush(self) -> None:
        """Store the records kept since the last chunk as a chunk of their own."""
        self._due = time.monotonic() + self._every_seconds
        if not self._buffer:
            return
        key = f"{self._prefix}{len(self._chunks):06d}.{self._run_id}.jsonl"
        write_crawl(self._store, key, self._buffer)
        self._chunks.append(key)
        self.written += len(self._buffer)
        self._buffer = []

    def clear(self) -> None:
        """The crawl is stored whole: its chunks go."""
        self._buffer = []
        for info in list(self._store.list(self._prefix)):
            self._store.delete(info.key)
        self._chunks = []
