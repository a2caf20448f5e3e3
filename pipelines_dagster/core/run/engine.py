"""One pipeline crawl, as the reference plan orders it: locks, credit hold, crawl, blob, charge.

Plain Python over the app database and the blob, lock, billing and crawl engines; the
`crawl_results` asset is a thin shell around `execute_crawl`."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from pipelines_dagster.core.crawl.credentials import HostCredentials
from pipelines_dagster.core.crawl.record import CrawlRecord, write_crawl
from pipelines_dagster.core.crawl.render.rule import RenderMemory, RenderMode
from pipelines_dagster.core.crawl.throttle import RequestWaits
from pipelines_dagster.core.crawl.types import CrawlOutcome, ListSource, PreviousFetch, UrlSource
from pipelines_dagster.core.ledger.billing import Billing, InsufficientCreditsError
from pipelines_dagster.core.run.checkpoint import Checkpoint
from pipelines_dagster.core.run.leases import NO_LOCK_WAIT, LockWait, OwnerStates, take_lock
from pipelines_dagster.core.run.plan import RunPlan, RunRefused
from pipelines_dagster.core.run.previous import PreviousCrawl, ResumedCrawl, outcome_record, stored_records
from pipelines_dagster.core.run.report import CrawlProgress, CrawlReport
from pipelines_dagster.core.storage.blob import BlobStore, run_result_key
from pipelines_dagster.core.storage.locks import LockHeldError, Locks, connector_lock_name, pipeline_lock_name

if TYPE_CHECKING:
    from pipelines_dagster.core.crawl.crawler import Crawler

LOCK_TTL_SECONDS = 600.0

RUN_IN_PROGRESS = "a run for this pipeline is already in progress"

CONNECTOR_INDEXING = "connector is currently indexing; retry later"

# How often a crawl waiting for its next page looks at its locks.
_HALT_CHECK_SECONDS = 0.5

# A long crawl reports how far it got at most this often, so its run log is not silent until it ends.
PROGRESS_EVERY_SECONDS = 10.0


class LockLost(Exception):
    """The crawl's lock was lost while it crawled: it stopped sending requests and charged nothing."""

    def __init__(self, name: str, *, pages: int) -> None:
        super().__init__(
            f"the crawl lost its lock {name!r} after {pages} pages: the lock expired or was taken away (a "
            "Redis restarted without persistence loses every lock), so another run may crawl this pipeline "
            "now; the crawl stopped sending requests, stored nothing and charged nothing"
        )
        self.name = name


_DONE = object()


# Whether a crawl freezes what exists as it starts (below); a process that runs one run after another keeps
# its long-lived objects frozen itself and turns this off (`leave_the_collector_to_the_process`).
_freeze_for_crawls = True


def leave_the_collector_to_the_process() -> None:
    """From now on, crawls leave the garbage collector's frozen objects alone: for a process that runs one run
    after another and freezes its long-lived objects itself. A crawl's unfreeze would hand them all back to the
    collector, and the next full pass would walk them all again (0.2 CPU-s after every run, measured)."""
    global _freeze_for_crawls
    _freeze_for_crawls = False


@contextmanager
def _collector_off_old_objects() -> Iterator[None]:
    """Keep the garbage collector's full passes off the objects that existed before the crawl.

    A Dagster process holds millions of long-lived objects; a full collection walks them all
    (0.1-0.2 s), and meanwhile the event loop stops feeding pages to the extraction workers.
    """
    if not _freeze_for_crawls:
        yield
        return
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
    waits: RequestWaits | None = None,
    render: RenderMode = RenderMode.NEVER,
    render_memory: RenderMemory | None = None,
    credentials: HostCredentials | None = None,
    user_agent: str | None = None,
    robots_waived: frozenset[str] = frozenset(),
) -> Iterator[CrawlOutcome]:
    """The async crawl as a plain iterator, so its outcomes can stream into a blocking blob write.

    The crawl runs on its own event loop in a thread, handing over outcomes through a small queue.
    `halt` is called while the consumer waits, at least every half second: what it raises stops the
    crawl. Once the consumer stops, for that or any reason, the crawl is cancelled: requests in
    flight are dropped and no new one is sent. `waits` counts what held its requests back.
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
        crawl = crawler.crawl_source(
            source,
            previous=previous,
            replay=replay,
            waits=waits,
            render=render,
            render_memory=render_memory,
            credentials=credentials,
            user_agent=user_agent,
            robots_waived=robots_waived,
        )
        async for outcome in crawl:
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
    pages complete, at most once every `progress_every_seconds` (PROGRESS_EVERY_SECONDS when None),
    with the counts so far and what limits the crawl's rate; the report names what limited it.

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
            pipeline_lock = take_lock(
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
            connector_lock = take_lock(
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

        render_memory = RenderMemory() if plan.render is RenderMode.AUTO else None
        previous = PreviousCrawl(stored_records(blob_store, previous_blob_key), render_memory=render_memory)
        held.callback(previous.close)
        resumed = ResumedCrawl(checkpoint.records() if checkpoint is not None else ())
        held.callback(resumed.close)
        source = _source(plan, previous, held, warn)
        # Normalized, as a site crawl's records name them; a list crawl's source has no stored keys.
        report.start_urls = frozenset(filter(None, map(source.stored_key, plan.urls)))

        every = PROGRESS_EVERY_SECONDS if progress_every_seconds is None else progress_every_seconds
        waits = RequestWaits()

        def locks_held() -> None:
            for lock in (pipeline_lock, connector_lock):
                if lock.lost.is_set():
                    raise LockLost(lock.name, pages=report.attempted)

        def records() -> Iterator[CrawlRecord]:
            # The rate counts from here: not the wait for locks before it.
            crawling = time.monotonic()
            next_progress = crawling + every
            replay = resumed.replay if len(resumed) else None
            crawled = iter_crawl(
                crawler,
                source,
                previous=previous.hints,
                halt=locks_held,
                replay=replay,
                waits=waits,
                render=plan.render,
                render_memory=render_memory,
                credentials=plan.credentials,
                user_agent=plan.user_agent,
                robots_waived=plan.robots_waived,
            )
            for outcome in crawled:
                record = resumed.record_of(outcome)
                report.resumed += record is not None
                if record is None:
                    record = outcome_record(outcome, previous)
                    if checkpoint is not None:
                        checkpoint.add(record)
                report.count(record)
                yield record
                now = time.monotonic()
                report.crawl_seconds = now - crawling
                if progress is not None and now >= next_progress:
                    next_progress = now + every
                    progress(
                        CrawlProgress(
                            done=report.attempted,
                            total=len(plan.urls) if source.discovered is None else source.discovered,
                            failed=report.failed,
                            succeeded=report.succeeded,
                            empty=report.empty,
                            resumed=report.resumed,
                            elapsed_seconds=now - crawling,
                            limits=tuple(waits.limits(now - crawling)),
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
    report.limits = tuple(waits.limits(report.crawl_seconds))
    return report
