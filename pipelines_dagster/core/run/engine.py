"""One pipeline crawl, as the reference plan orders it: guards, locks, credit check, crawl, blob, charge.

Plain Python over the app database and the blob, lock, billing and crawl
engines; the `crawl_results` asset is a thin shell around `execute_crawl`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import mmap
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Connector, ConnectorType, Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.core.catalog.connector_types import ineligible_reason, is_pipeline_eligible
from pipelines_dagster.core.catalog.connectors import initial_urls
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.crawl.record import CrawlRecord, StoredPage, read_crawl, write_crawl
from pipelines_dagster.core.crawl.site.config import SITE_KEY, CrawlMode, SiteConfig, crawl_mode
from pipelines_dagster.core.crawl.types import CrawlOutcome, ListSource, PreviousFetch, UrlSource
from pipelines_dagster.core.errors import ConflictError, InvalidInputError
from pipelines_dagster.core.ledger.billing import Billing, InsufficientCreditsError
from pipelines_dagster.core.run.checkpoint import Checkpoint
from pipelines_dagster.core.storage.blob import BlobNotFoundError, BlobStore, run_result_key
from pipelines_dagster.core.storage.locks import HeldLock, LockHeldError, Locks, connector_lock_name, pipeline_lock_name

if TYPE_CHECKING:
    from pipelines_dagster.core.crawl.crawler import Crawler

LOCK_TTL_SECONDS = 600.0
# How often a crawl renews its locks, so it notices one lost (expired, deleted, a Redis restarted empty)
# within this long and stops; the TTL only bounds how long a dead process's lock outlives it.
LOCK_RENEW_SECONDS = 10.0
# How often a crawl waiting for a lock another run holds asks for it again.
_LOCK_POLL_SECONDS = 1.0
RUN_IN_PROGRESS = "a run for this pipeline is already in progress"
CONNECTOR_INDEXING = "connector is currently indexing; retry later"
# How often a crawl waiting for its next page looks at its locks.
_HALT_CHECK_SECONDS = 0.5
# A long crawl reports how far it got at most this often, so its run log is not silent until it ends.
PROGRESS_EVERY_SECONDS = 10.0
# Linux maps the pages around a faulting one, in aligned windows of this size (fault_around_bytes).
_FAULT_WINDOW = 64 * 1024
FAILED_URLS_SHOWN = 20


class RunRefused(ConflictError):
    """A guard stopped the run before any crawl or charge; the message says why."""


class LockLost(Exception):
    """The crawl's lock was lost while it crawled: it stopped sending requests and charged nothing."""

    def __init__(self, name: str, *, pages: int) -> None:
        super().__init__(
            f"the crawl lost its lock {name!r} after {pages} pages: the lock expired or was taken away (a "
            "Redis restarted without persistence loses every lock), so another run may crawl this pipeline "
            "now; the crawl stopped sending requests, stored nothing and charged nothing"
        )
        self.name = name


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    pipeline_id: int
    workspace_id: int
    connector_id: int
    save_to_kb: bool
    folder_id: int | None
    urls: tuple[str, ...]
    """The list to crawl; a site crawl's start URLs."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    site: SiteConfig | None = None
    """The bounds of a site crawl; None for a list crawl."""
    max_runtime_seconds: int | None = None
    """How long one run of the pipeline may take; None: the deployment's maximum runtime."""

    @property
    def most_pages(self) -> int:
        """The most pages the crawl can fetch: what the credit check asks for before it starts."""
        return self.site.max_pages if self.site is not None else len(self.urls)


def plan_run(session: Session, pipeline_id: int) -> RunPlan:
    """The guards, in the reference plan's order; RunRefused names the first that fails."""
    pipeline = session.get(Pipeline, pipeline_id)
    if pipeline is None:
        raise RunRefused(f"pipeline {pipeline_id} does not exist")
    if not pipeline.enabled:
        raise RunRefused(f"pipeline {pipeline_id} is disabled; enable it before running it")
    if pipeline.connector_id is None:
        raise RunRefused("uploads pipeline has no fetch executor")
    connector = session.get(Connector, pipeline.connector_id)
    assert connector is not None  # the foreign key cascades deletes
    # Re-checked here: the type may have become ineligible since the pipeline was created.
    if not is_pipeline_eligible(connector.connector_type):
        raise RunRefused(f"{ineligible_reason(connector.connector_type)} any more; the run is not started")
    if connector.connector_type != ConnectorType.WEBCRAWLER.value:
        raise RunRefused(f"executor not implemented for {connector.connector_type}")
    site = _site_config(connector)
    urls = list(site.start_urls) if site is not None else initial_urls(pipeline) or initial_urls(connector) or []
    if not urls:
        raise RunRefused("no URLs to crawl")
    return RunPlan(
        pipeline_id=pipeline.id,
        workspace_id=pipeline.workspace_id,
        connector_id=connector.id,
        save_to_kb=pipeline.save_to_kb,
        folder_id=pipeline.destination_folder_id,
        urls=tuple(dict.fromkeys(urls)),
        retry=RetryPolicy.of(pipeline),
        site=site,
        max_runtime_seconds=pipeline.max_runtime_seconds,
    )


def plan_manual_run(session: Session, pipeline_id: int) -> RunPlan:
    """The guards of a run started by hand (run-now from the API, the CLI): the run's own, then the
    pipeline's manual trigger, which must be there and on; RunRefused says how to switch it on.

    A launch from the Dagster UI is an operator's and does not pass here: its crawl step checks only
    `plan_run`, so the UI can run any partition whatever its manual trigger says.
    """
    plan = plan_run(session, pipeline_id)
    manual = session.scalar(
        sa.select(PipelineTrigger).where(
            PipelineTrigger.pipeline_id == pipeline_id, PipelineTrigger.kind == TriggerKind.MANUAL.value
        )
    )
    where = f"--workspace {plan.workspace_id} --pipeline {pipeline_id}"
    if manual is None:
        raise RunRefused(
            f"pipeline {pipeline_id} has no manual trigger, so it cannot be run by hand; add one with "
            f"`pipelines-dagster trigger create {where} --kind manual` (API: POST .../triggers "
            '{"kind": "manual"})'
        )
    if not manual.enabled:
        raise RunRefused(
            f"pipeline {pipeline_id} has no enabled manual trigger (trigger {manual.id} is off), so it cannot be "
            f"run by hand; enable it with `pipelines-dagster trigger enable {where} --trigger {manual.id}` "
            f"(API: POST .../triggers/{manual.id}/enable)"
        )
    return plan


def _site_config(connector: Connector) -> SiteConfig | None:
    """The connector's site-crawl bounds, re-validated (a row may come from an older release or a
    hand edit); None in list mode. RunRefused says what to fix."""
    try:
        if crawl_mode(connector.config) is not CrawlMode.SITE:
            return None
        return SiteConfig.read(connector.config.get(SITE_KEY) or {})
    except InvalidInputError as exc:
        raise RunRefused(f"connector {connector.id} has an invalid site-crawl config: {exc}") from None


def load_plan(engine: sa.Engine, pipeline_id: int) -> RunPlan:
    with Session(engine) as session:
        return plan_run(session, pipeline_id)


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
    file is kept.
    """

    def __init__(self, records: Iterable[CrawlRecord] | None = None) -> None:
        self.hints: dict[str, PreviousFetch] = {}

        def successes() -> Iterator[tuple[str, bytes]]:
            for record in records or ():
                if not record.succeeded:
                    continue
                self.hints[record.url] = PreviousFetch(
                    etag=record.etag,
                    last_modified=record.last_modified,
                    raw_hash=record.raw_hash,
                    content_hash=record.content_hash,
                )
                yield record.url, orjson.dumps([record.content, record.metadata, record.links, record.canonical])

        self._spool = _Spool(successes(), prefix="previous-crawl-")

    def stored(self, url: str) -> StoredPage | None:
        """What the previous crawl stored for `url`; None when it has no success for it."""
        stored = self._spool.get(url)
        if stored is None:
            return None
        content, metadata, links, canonical = orjson.loads(stored)
        return StoredPage(content=content, metadata=metadata, links=links, canonical=canonical)

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


def _stored_records(blob_store: BlobStore, key: str | None) -> Iterator[CrawlRecord] | None:
    """A stored crawl's records; None when there is none (first crawl, or pruned by retention)."""
    if key is None:
        return None
    try:
        return read_crawl(blob_store, key)
    except BlobNotFoundError:
        return None


_DONE = object()


@contextmanager
def _collector_off_old_objects() -> Iterator[None]:
    """Keep the garbage collector's full passes off the objects that existed before the crawl.

    A Dagster process holds millions of long-lived objects; a full collection walks them all
    (0.1-0.2 s), and meanwhile the event loop stops feeding pages to the extraction workers.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def iter_crawl(
    crawler: Crawler,
    source: UrlSource,
    *,
    previous: Mapping[str, PreviousFetch],
    halt: Callable[[], None] | None = None,
    replay: Callable[[str], CrawlOutcome | None] | None = None,
) -> Iterator[CrawlOutcome]:
    """The async crawl as a plain iterator, so its outcomes can stream into a blocking blob write.

    The crawl runs on its own event loop in a thread, handing over outcomes through a small queue.
    `halt` is called while the consumer waits, at least every half second: what it raises stops the
    crawl. Once the consumer stops, for that or any reason, the crawl is cancelled: requests in
    flight are dropped and no new one is sent.
    """
    handoff: queue.Queue[Any] = queue.Queue(maxsize=64)
    stop = threading.Event()
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []

    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    async def produce() -> None:
        task = asyncio.current_task()
        assert task is not None
        running.append((asyncio.get_running_loop(), task))
        async for outcome in crawler.crawl_source(source, previous=previous, replay=replay):
            if stop.is_set():
                return
            try:
                handoff.put_nowait(outcome)
            except queue.Full:
                # Only a full queue (a slow blob write) needs a thread to wait in, off the event loop.
                await asyncio.to_thread(put, outcome)

    def run() -> None:
        try:
            asyncio.run(produce())
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put(exc)

    def cancel() -> None:
        for loop, task in running:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the crawl ended already
                loop.call_soon_threadsafe(task.cancel)

    worker = threading.Thread(target=run, name="crawl", daemon=True)
    worker.start()
    try:
        while True:
            if halt is not None:
                halt()
            try:
                item = handoff.get(timeout=_HALT_CHECK_SECONDS)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        cancel()
        worker.join()


class OwnerState(enum.Enum):
    """What the orchestrator says of a lock's owner (a run id)."""

    RUNNING = "running"
    """Queued or in progress: the lock is its own."""
    ENDED = "ended"
    """Ended: a lock it still owns was left by its dead process."""
    UNKNOWN = "unknown"
    """Not a run the orchestrator knows."""


OwnerStates = Callable[[str], OwnerState]


@dataclass(frozen=True, kw_only=True)
class LockWait:
    """How a crawl meets a lock another run holds: it waits up to `seconds` while that run is in
    progress (0: refused at once); `waiting(owner)` is told once when it starts to wait."""

    seconds: float = 0.0
    waiting: Callable[[str], None] | None = None


NO_LOCK_WAIT = LockWait()


def _take_lock(
    held: ExitStack,
    locks: Locks,
    name: str,
    run_id: str,
    *,
    ttl_seconds: float,
    owners: OwnerStates | None,
    wait: LockWait,
) -> HeldLock:
    """Hold `name` for the run until `held` closes; LockHeldError while a live owner has it.

    A lock still owned by a run that has ended was left by a run whose process died. The
    lock-release sensor frees it on its next tick, but a run started before that (a user's
    relaunch, the instance's retry of the dead run) would be refused while nothing runs. A lock
    the run owns itself is its own earlier attempt's, whose release failed (an outage of the locks'
    backend, which failed that attempt too): the run's retry takes it again. A lock a run in
    progress holds is waited for, within `wait`: the run queue cannot hold a run back behind a
    batch run that covers its pipeline, so two can start together, and the later one crawls after.
    """

    def hold() -> HeldLock:
        return held.enter_context(
            locks.hold(name, run_id, ttl_seconds=ttl_seconds, renew_every=min(LOCK_RENEW_SECONDS, ttl_seconds / 3))
        )

    deadline = time.monotonic() + wait.seconds
    told = False
    while True:
        try:
            return hold()
        except LockHeldError:
            owner = locks.owner_of(name)
            if owner is None and time.monotonic() < deadline:
                continue  # freed between the two calls
            state = owners(owner) if owners is not None and owner is not None else OwnerState.UNKNOWN
            if owner is not None and (owner == run_id or state is OwnerState.ENDED):
                break
            if state is not OwnerState.RUNNING or time.monotonic() >= deadline:
                raise
            if not told and wait.waiting is not None and owner is not None:
                wait.waiting(owner)
                told = True
            time.sleep(min(_LOCK_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    # Frees it only while that owner still has it: if another run took it in the meantime,
    # the hold below is refused as it should be.
    locks.release(name, owner)
    return hold()


def _source(plan: RunPlan, previous: PreviousCrawl, held: ExitStack, warn: Callable[[str], None] | None) -> UrlSource:
    """The crawl's URLs: the plan's list, or a site crawl's discovery over a frontier on disk."""
    if plan.site is None:
        return ListSource(plan.urls)
    # Here, not at the top: a list crawl's run process does without discovery's modules.
    from pipelines_dagster.core.crawl.site.frontier import Frontier
    from pipelines_dagster.core.crawl.site.source import SiteSource

    frontier = held.enter_context(Frontier(max_pages=plan.site.max_pages, max_depth=plan.site.max_depth))

    def stored_links(url: str) -> list[str]:
        stored = previous.stored(url)
        return stored.links if stored is not None else []

    return SiteSource[CrawlOutcome](plan.site, frontier, stored_links=stored_links, warn=warn)


def execute_crawl(
    plan: RunPlan,
    *,
    run_id: str,
    charge_key: str,
    locks: Locks,
    billing: Billing,
    blob_store: BlobStore,
    crawler: Crawler,
    previous_blob_key: str | None,
    lock_ttl_seconds: float = LOCK_TTL_SECONDS,
    owners: OwnerStates | None = None,
    lock_wait: LockWait = NO_LOCK_WAIT,
    progress: Callable[[CrawlProgress], None] | None = None,
    progress_every_seconds: float | None = None,
    checkpoint: Checkpoint | None = None,
    warn: Callable[[str], None] | None = None,
) -> CrawlReport:
    """Crawl the plan's URLs into a JSON Lines blob and charge the successes once per `charge_key`.

    Raises RunRefused for a held lock or missing credit, before any request is sent. A lock whose
    owner `owners` says is a run that has ended is taken over instead, and one a run in progress
    holds is waited for within `lock_wait`. `progress` is called as
    pages complete, at most once every `progress_every_seconds` (PROGRESS_EVERY_SECONDS when None).

    With a `checkpoint`, what the crawl fetches is also stored there as it goes (and once more when
    it is stopped), and what earlier runs of the same crawl stored there is replayed, not fetched:
    the crawl goes on where they stopped, and stores and charges the whole crawl, as one run would
    have. The checkpoint is cleared once the crawl is stored and charged.
    """
    started = time.monotonic()
    key = run_result_key(workspace_id=plan.workspace_id, pipeline_id=plan.pipeline_id, run_id=run_id)
    report = CrawlReport(blob_key=key, blob_url=blob_store.url(key))
    with ExitStack() as held:
        # Both locks are owned by the run, so a run-status sensor can free what a dead run left.
        try:
            pipeline_lock = _take_lock(
                held,
                locks,
                pipeline_lock_name(plan.pipeline_id),
                run_id,
                ttl_seconds=lock_ttl_seconds,
                owners=owners,
                wait=lock_wait,
            )
        except LockHeldError:
            raise RunRefused(RUN_IN_PROGRESS) from None
        try:
            connector_lock = _take_lock(
                held,
                locks,
                connector_lock_name(plan.connector_id),
                run_id,
                ttl_seconds=lock_ttl_seconds,
                owners=owners,
                wait=lock_wait,
            )
        except LockHeldError:
            raise RunRefused(CONNECTOR_INDEXING) from None
        try:
            billing.reserve(plan.workspace_id, plan.most_pages, idempotency_key=charge_key, run_id=run_id)
        except InsufficientCreditsError as exc:
            raise RunRefused(str(exc)) from None

        previous = PreviousCrawl(_stored_records(blob_store, previous_blob_key))
        held.callback(previous.close)
        resumed = ResumedCrawl(checkpoint.records() if checkpoint is not None else ())
        held.callback(resumed.close)
        source = _source(plan, previous, held, warn)
        # Normalized, as a site crawl's records name them; a list crawl's source has no stored keys.
        report.start_urls = frozenset(filter(None, map(source.stored_key, plan.urls)))

        every = PROGRESS_EVERY_SECONDS if progress_every_seconds is None else progress_every_seconds

        def locks_held() -> None:
            for lock in (pipeline_lock, connector_lock):
                if lock.lost.is_set():
                    raise LockLost(lock.name, pages=report.attempted)

        def records() -> Iterator[CrawlRecord]:
            next_progress = started + every
            replay = resumed.replay if len(resumed) else None
            for outcome in iter_crawl(crawler, source, previous=previous.hints, halt=locks_held, replay=replay):
                record = resumed.record_of(outcome)
                report.resumed += record is not None
                if record is None:
                    record = outcome_record(outcome, previous)
                    if checkpoint is not None:
                        checkpoint.add(record)
                report.count(record)
                yield record
                if progress is not None and (now := time.monotonic()) >= next_progress:
                    next_progress = now + every
                    progress(
                        CrawlProgress(
                            done=report.attempted,
                            total=len(plan.urls) if source.discovered is None else source.discovered,
                            failed=report.failed,
                            elapsed_seconds=now - started,
                        )
                    )

        try:
            with _collector_off_old_objects():
                report.bytes_written = write_crawl(blob_store, key, records())
        except LockLost:
            raise  # another run may crawl now: what this one fetched since is not its to keep
        except BaseException:
            # Stopped (past its maximum runtime, a failure): what it fetched since the last chunk is kept
            # for the run that continues it.
            if checkpoint is not None:
                with contextlib.suppress(Exception):
                    checkpoint.flush()
            raise
        # A lock lost after the last page: another run may have crawled alongside, so nothing is charged.
        locks_held()
        charge = billing.charge(
            plan.workspace_id,
            billing.successes_to_micros(report.succeeded),
            idempotency_key=charge_key,
            usage={
                "urls": len(plan.urls),
                "successes": report.succeeded,
                "pipeline_id": plan.pipeline_id,
                "run_id": run_id,
            },
        )
        report.charged_micros = charge.micros
        report.newly_charged = charge.newly_charged
        report.pages_discovered, report.discovery_truncated = source.discovered, source.truncated
        report.pages_duplicate = source.duplicates
        report.pages_links_capped = source.links_capped
        report.sitemaps_skipped, report.sitemaps_truncated = source.sitemaps_skipped, source.sitemaps_truncated
        if checkpoint is not None:
            checkpoint.clear()
    report.duration_seconds = time.monotonic() - started
    return report
