"""A run's process killed -9 mid-crawl, under `dagster dev` on the embedded default, as a user runs it.

The run must end FAILURE and take its extraction workers with it; Dagster's run retries then
re-execute it once, automatically, and the retry succeeds, taking over the locks the dead run
left. The crawl is charged once, under the root run, and no lock is left behind.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator

import dagster as dg
import psutil
import pytest
import sqlalchemy as sa

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import CreditHold, CreditLedgerEntry, Document, PageChange
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.core.run.checkpoint import checkpoint_prefix
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore
from pipelines_dagster.core.storage.locks import DatabaseLocks, connector_lock_name, pipeline_lock_name
from pipelines_dagster.history import RunHistory
from pipelines_dagster.launch import GraphQLLauncher, launch_pipeline_run
from tests.support import ledger
from tests.support.dagster_dev import Dev, dagster_dev, seed, wait_for
from tests.support.web import Reply, html_document, page

pytestmark = pytest.mark.integration

PAGES = 20
# Each reply waits this long; at four requests per host at a time the crawl lasts about 5 s.
PAGE_DELAY_SECONDS = 1.0
# Answered at once, and about 10 s of extraction (many tiny paragraphs): the kill finds a worker inside it.
HEAVY_PAGE = html_document("Heavy", "\n\n".join(f"w{n} x" for n in range(70000)))
# Dagster's code server notices a dead run process within a second; a minute is the outer bound.
FAILED_WITHIN_SECONDS = 60.0
# A worker watches its parent, so it goes within a second of it, whatever page it is on.
WORKERS_GONE_WITHIN_SECONDS = 3.0
# The daemon looks for failed runs to retry every 5 s; the retry queues, starts and crawls it all again.
RETRY_DONE_WITHIN_SECONDS = 120.0
# The run-status sensors tick every 10 s at the least, and a tick may wait for the one before.
HOLD_RELEASED_WITHIN_SECONDS = 60.0


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with dagster_dev(tmp_path_factory.mktemp("crash")) as deployment:
        yield deployment


def _seed(dev: Dev) -> tuple[int, int, int]:
    """A workspace with credit, a web connector over a heavy page and PAGES slow ones, and a KB pipeline."""
    dev.site.route("/heavy", Reply(body=HEAVY_PAGE))
    urls = [dev.site.url("/heavy")]
    for n in range(PAGES):
        dev.site.route(f"/slow/{n}", page(f"Slow {n}", f"Page {n} answers after a second.", delay=PAGE_DELAY_SECONDS))
        urls.append(dev.site.url(f"/slow/{n}"))
    with transaction(dev.sessions) as session:
        workspace = create_workspace(session, name="crash", owner_user_id="owner").workspace
        connector = create_connector(session, workspace_id=workspace.id, connector_type="webcrawler", urls=urls)
        pipeline = services.create_pipeline(
            session, dev.instance, workspace_id=workspace.id, connector_id=connector.id, name="crash", save_to_kb=True
        )
        ids = workspace.id, connector.id, pipeline.id
    Billing(dev.sessions, enabled=True, micros_per_crawl=1000).grant(ids[0], 1_000_000)
    return ids


def _holds(dev: Dev, workspace_id: int) -> list[tuple[str, str]]:
    """(run id, status) of the workspace's credit holds."""
    return ledger.holds(dev.sessions, workspace_id, CreditHold.run_id, CreditHold.status)


def _crawling(dev: Dev, run_id: str) -> Callable[[], int | None]:
    """The run's process id, once it is crawling with a worker inside the heavy page."""

    def crawling() -> int | None:
        pid = dev.run_pid(run_id)
        if pid is None or not any(request.path.startswith("/slow/") for request in dev.site.requests):
            return None
        # A worker's start-up costs a few tenths of a CPU-second; past a whole one it is inside the heavy page.
        return pid if any(_cpu_seconds(worker) >= 1.0 for worker in _extraction_workers(pid)) else None

    return crawling


def _extraction_workers(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    workers = []
    for child in children:
        try:
            if "pipelines_dagster.core.crawl.extract.worker_process" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.Error:
            continue
    return workers


def _cpu_seconds(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return times.user + times.system


def _alive(process: psutil.Process) -> bool:
    """Still running: a zombie has exited (its new parent may not reap it at once)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _retry_of(dev: Dev, run_id: str) -> dg.DagsterRun | None:
    """The run Dagster's run retries launched for `run_id`, once it has ended."""
    retries = dev.instance.get_runs(dg.RunsFilter(tags={"dagster/parent_run_id": run_id}))
    return retries[0] if retries and retries[0].is_finished else None


def test_a_run_killed_mid_crawl_fails_frees_its_workers_and_is_retried_once_with_one_charge(dev: Dev) -> None:
    workspace_id, connector_id, pipeline_id = _seed(dev)
    launcher = GraphQLLauncher(dev.ui_url)
    run_id = launch_pipeline_run(dev.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id, launcher=launcher)
    run_pid = wait_for("the run to be crawling, a worker inside the heavy page", _crawling(dev, run_id), timeout=90)
    locks = DatabaseLocks(dev.engine)
    lock_names = [pipeline_lock_name(pipeline_id), connector_lock_name(connector_id)]
    assert [locks.owner_of(name) for name in lock_names] == [run_id, run_id]
    assert _holds(dev, workspace_id) == [(run_id, "open")]

    workers = _extraction_workers(run_pid)
    assert workers
    os.kill(run_pid, signal.SIGKILL)
    killed = time.monotonic()

    def gone() -> bool:
        return not any(_alive(worker) for worker in workers)

    wait_for(
        f"extraction workers {[worker.pid for worker in workers]} to exit",
        gone,
        timeout=WORKERS_GONE_WITHIN_SECONDS,
        every=0.05,
    )
    workers_gone = time.monotonic() - killed

    run = dev.failed(run_id, timeout=FAILED_WITHIN_SECONDS)
    failed_after = time.monotonic() - killed
    # Its worker died: not an asset or op failure, so the instance retries it.
    assert run.tags["dagster/will_retry"] == "true", run.tags
    assert not [worker.pid for worker in workers if _alive(worker)]

    retry = wait_for(
        "the automatic retry to end", lambda: _retry_of(dev, run_id), timeout=RETRY_DONE_WITHIN_SECONDS, every=0.5
    )
    retried_after = time.monotonic() - killed
    assert retry.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()
    assert (retry.root_run_id, retry.tags["dagster/retry_number"]) == (run_id, "1")
    assert (retry.tags["pipeline_id"], retry.tags["trigger"]) == (str(pipeline_id), "manual")
    # Exactly one retry: the run group is the killed run and its retry.
    assert {r.run_id for r in dev.instance.get_runs(dg.RunsFilter(tags={"dagster/root_run_id": run_id}))} == {
        retry.run_id
    }
    # The retry took over the locks the dead run left, and released them when it ended.
    assert [locks.owner_of(name) for name in lock_names] == [None, None]

    # The charge is made once after a crawl ends and keyed by the root run: the killed run made none
    # before it died, and its retry made the one charge, under the killed run's id.
    assert ledger.charges(dev.sessions, workspace_id) == [f"crawl:{run_id}:{pipeline_id}"]
    # The retry took over the killed run's hold (one per charge key) and its charge settled it.
    assert _holds(dev, workspace_id) == [(retry.run_id, "settled")]
    print(
        f"\nkill -9 of run process {run_pid}: workers gone after {workers_gone:.2f} s, run FAILURE after "
        f"{failed_after:.2f} s; its automatic retry succeeded {retried_after:.2f} s after the kill"
    )


def test_a_killed_run_that_is_not_retried_has_its_credit_hold_released_by_its_end(dev: Dev) -> None:
    workspace_id, _, pipeline_id = _seed(dev)
    run_id = launch_pipeline_run(
        dev.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id, launcher=GraphQLLauncher(dev.ui_url)
    )
    run_pid = wait_for("the run to be crawling", _crawling(dev, run_id), timeout=90)
    # As a run launched with this tag: Dagster's run retries leave it alone.
    dev.instance.add_run_tags(run_id, {"dagster/max_retries": "0"})
    billing = Billing(dev.sessions, enabled=True, micros_per_crawl=1000)
    held = billing.summary(workspace_id).held_micros
    assert held == (PAGES + 1) * 1000
    os.kill(run_pid, signal.SIGKILL)
    run = dev.failed(run_id, timeout=FAILED_WITHIN_SECONDS)
    assert run.tags["dagster/will_retry"] == "false", run.tags
    # The run-status sensor that frees a failed run's locks gives its hold back too.
    wait_for(
        "the killed run's hold to be released",
        lambda: _holds(dev, workspace_id) == [(run_id, "released")],
        timeout=HOLD_RELEASED_WITHIN_SECONDS,
        every=0.5,
    )
    summary = billing.summary(workspace_id)
    assert (summary.held_micros, summary.balance_micros) == (0, 1_000_000)


LONG_PAGES = 36
# Four requests per host at a time, two seconds each: 18 s of crawling, past the runtime allowed.
LONG_PAGE_DELAY_SECONDS = 2.0
MAX_RUNTIME_SECONDS = 12
# Run monitoring polls every 5 s (deploy/dagster.yaml); then the run is interrupted and failed.
STOPPED_WITHIN_SECONDS = MAX_RUNTIME_SECONDS + 15.0 + 30.0


def _crawl_result(dev: Dev, workspace_id: int, pipeline_id: int) -> dict[str, object]:
    """What a finished crawl left, with URLs by page number: documents, the timeline, the ledger."""

    def page_of(url: str) -> str:
        return url.rsplit("/", 1)[1]

    with dev.sessions() as session:
        documents = session.execute(
            sa.select(Document.url, Document.content).where(Document.pipeline_id == pipeline_id)
        ).all()
        changes = session.execute(
            sa.select(PageChange.url, PageChange.status).where(PageChange.pipeline_id == pipeline_id)
        ).all()
    return {
        "documents": sorted((page_of(url), content) for url, content in documents),
        "timeline": sorted((page_of(url), status) for url, status in changes),
        "charges": ledger.charges(dev.sessions, workspace_id, CreditLedgerEntry.delta_micros),
    }


def _checkpointed(dev: Dev, workspace_id: int, pipeline_id: int, root_run_id: str) -> set[str]:
    """The URLs the crawl's checkpoint holds now."""
    store = LocalBlobStore(dev.home.parent / "data" / "blobs")
    prefix = checkpoint_prefix(workspace_id=workspace_id, pipeline_id=pipeline_id, root_run_id=root_run_id)
    return {record["url"] for info in store.list(prefix) for record in store.read_jsonl(info.key)}


def test_a_crawl_past_its_max_runtime_fails_for_it_and_a_continuation_fetches_only_what_was_not_stored(dev: Dev):
    long = seed(
        dev,
        "long",
        pages=LONG_PAGES,
        delay=LONG_PAGE_DELAY_SECONDS,
        topic="the crawl",
        max_runtime_seconds=MAX_RUNTIME_SECONDS,
    )
    workspace_id, pipeline_id, long_urls = long.workspace_id, long.pipeline_id, long.urls
    launcher = GraphQLLauncher(dev.ui_url)
    run_id = launch_pipeline_run(dev.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id, launcher=launcher)

    ended = wait_for("the run to end", lambda: dev.ended(run_id), timeout=STOPPED_WITHIN_SECONDS)
    assert ended.status == dg.DagsterRunStatus.FAILURE, ended.status
    first = dev.failed(run_id, timeout=10)
    assert first.tags["dagster/max_runtime"] == str(MAX_RUNTIME_SECONDS)
    [failure] = dev.instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert f"Exceeded maximum runtime of {MAX_RUNTIME_SECONDS} seconds" in failure.message, failure.message
    record = dev.instance.get_run_record_by_id(run_id)
    # Enforced within 15 s of its deadline (monitoring polls every 5 s), not at Dagster's default 120 s.
    assert record.end_time - record.start_time <= MAX_RUNTIME_SECONDS + 15, (record.start_time, record.end_time)
    stored = _checkpointed(dev, workspace_id, pipeline_id, run_id)
    path = {url: url.removeprefix(dev.site.url("")) for url in long_urls}
    fetched = {url for url in long_urls if dev.site.hits(path[url])}
    assert stored and stored <= fetched and len(stored) < LONG_PAGES
    # Its locks went with it: the continuation takes them.
    locks = DatabaseLocks(dev.engine)
    assert locks.owner_of(pipeline_lock_name(pipeline_id)) != run_id

    def chain_done() -> list[dg.DagsterRun] | None:
        runs = dev.instance.get_runs(dg.RunsFilter(tags={"dagster/root_run_id": run_id}))
        last = runs[0] if runs else None
        return runs if last is not None and last.status == dg.DagsterRunStatus.SUCCESS else None

    continuations = wait_for("the crawl to be continued to its end", chain_done, timeout=RETRY_DONE_WITHIN_SECONDS * 2)
    assert len(continuations) <= 3
    assert all(run.tags["pipeline_id"] == str(pipeline_id) for run in continuations)
    # Each stored page was fetched once, never again; the pages in flight when a run stopped once more.
    assert all(dev.site.hits(path[url]) == 1 for url in stored)
    assert all(1 <= dev.site.hits(path[url]) <= 2 for url in long_urls)
    [crawl] = [
        entry.asset_materialization.metadata
        for entry in dev.instance.all_logs(continuations[0].run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        if entry.asset_materialization.asset_key == dg.AssetKey("crawl_results")
    ]
    assert crawl["pages_resumed"].value >= len(stored) and crawl["urls_attempted"].value == LONG_PAGES
    assert crawl["resumed_from_run_id"].value == run_id
    # Run history shows the chain: the stopped run failed for time, the one that finished continued it.
    history = RunHistory(dev.instance, dev.sessions).list_runs(workspace_id, pipeline_id=pipeline_id, limit=10)
    views = {view.run_id: view for view in history.runs}
    assert views[run_id].status == "failed" and "Exceeded maximum runtime" in (views[run_id].error or "")
    assert views[run_id].root_run_id is None and views[run_id].pages_resumed is None
    finished = views[continuations[0].run_id]
    assert (finished.status, finished.root_run_id, finished.crawls_attempted) == ("succeeded", run_id, LONG_PAGES)
    assert finished.pages_resumed == crawl["pages_resumed"].value
    assert sum(view.new_charge_micros or 0 for view in views.values()) == LONG_PAGES * 1000
    # Cleared once the whole crawl was stored.
    assert _checkpointed(dev, workspace_id, pipeline_id, run_id) == set()
    assert [locks.owner_of(pipeline_lock_name(pipeline_id))] == [None]

    # The same site crawled by one uninterrupted run leaves the same documents, timeline and charge.
    whole = seed(dev, "whole", pages=LONG_PAGES, topic="the crawl")
    whole_workspace, whole_pipeline = whole.workspace_id, whole.pipeline_id
    whole_run = launch_pipeline_run(
        dev.sessions, workspace_id=whole_workspace, pipeline_id=whole_pipeline, launcher=launcher
    )
    ended_whole = wait_for("the uninterrupted crawl", lambda: dev.ended(whole_run), timeout=RETRY_DONE_WITHIN_SECONDS)
    assert ended_whole.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()
    resumed, uninterrupted = (
        _crawl_result(dev, workspace_id, pipeline_id),
        _crawl_result(dev, whole_workspace, whole_pipeline),
    )
    assert resumed == uninterrupted
    assert resumed["charges"] == [-LONG_PAGES * 1000]
    assert len(resumed["documents"]) == LONG_PAGES
