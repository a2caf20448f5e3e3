"""RunHistory over real runs of the pipeline assets, on a real Dagster instance and app database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteRepositoryOrigin

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.run import engine as run_engine
from pipelines_dagster.history import RUN_STATUS, RunHistory
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.runs import PARTITION_TAG, run_tags
from tests.assets.conftest import Stack, embedded, materialization, production, stack, web  # noqa: F401
from tests.assets.test_batch import run_batch
from tests.support.web import page

UI = "http://dagster.test/"


def history(stack: Stack, *, ui_base_url: str | None = UI) -> RunHistory:
    return RunHistory(stack.instance, stack.sessions, ui_base_url=ui_base_url)


def rename(stack: Stack, pipeline_id: int, name: str) -> None:
    with transaction(stack.sessions) as session:
        session.get(Pipeline, pipeline_id).name = name


def add_pipeline(stack: Stack, workspace_id: int, urls: list[str], *, name: str, enabled: bool = True) -> int:
    """Another pipeline, over its own connector, in an existing workspace."""
    with transaction(stack.sessions) as session:
        connector = create_connector(session, workspace_id=workspace_id, connector_type="webcrawler", urls=urls)
        pipeline_id = services.create_pipeline(
            session,
            stack.instance,
            workspace_id=workspace_id,
            connector_id=connector.id,
            name=name,
            folder_name="Docs",
            enabled=enabled,
        ).id
    if not enabled:
        stack.keep_partition(pipeline_id)
    return pipeline_id


def unlaunched_run(stack: Stack, workspace_id: int, pipeline_id: int, status: dg.DagsterRunStatus) -> dg.DagsterRun:
    """A `pipeline_run` run as the webserver creates it for the code location, before any worker picks it up."""
    job = dg.Definitions(
        assets=[crawl_results, kb_documents, page_changes], jobs=[pipeline_run], resources=stack.resources()
    ).resolve_job_def(pipeline_run.name)
    tags = {
        **run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="webhook"),
        PARTITION_TAG: str(pipeline_id),
    }
    origin = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("pipelines_dagster"), "__repository__")
    return stack.instance.create_run_for_job(
        job_def=job, status=status, tags=tags, remote_job_origin=origin.get_job_origin(pipeline_run.name)
    )


@contextmanager
def counted_queries() -> Iterator[dict[sa.Engine, int]]:
    """SELECT statements run per engine (Dagster's storages and the app DB) inside the block."""
    counts: dict[sa.Engine, int] = {}

    def count(conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            counts[conn.engine] = counts.get(conn.engine, 0) + 1

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    try:
        yield counts
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)


def test_every_dagster_status_has_a_run_status():
    assert set(RUN_STATUS) == set(dg.DagsterRunStatus)
    expected = {
        "QUEUED": "queued",
        "NOT_STARTED": "queued",
        "STARTING": "queued",
        "STARTED": "running",
        "CANCELING": "running",
        "SUCCESS": "succeeded",
        "FAILURE": "failed",
        "CANCELED": "canceled",
    }
    assert {status.value: RUN_STATUS[status] for status in RUN_STATUS if status.value in expected} == expected


def test_a_succeeded_run_shows_its_trigger_counts_blob_charge_and_steps(stack: Stack):
    stack.billing_enabled = True
    urls = [*stack.site(4), stack.web.url("/missing")]
    workspace_id, pipeline_id = stack.pipeline(urls, credit=100_000)
    rename(stack, pipeline_id, "Docs nightly")
    result = stack.run(pipeline_id, workspace_id, trigger="scheduled")
    assert result.success
    crawl = materialization(result, "crawl_results")

    page = history(stack).list_runs(workspace_id)
    [run] = page.runs
    assert page.next_cursor is None
    assert (run.run_id, run.pipeline_id, run.pipeline_name, run.workspace_id) == (
        result.run_id,
        pipeline_id,
        "Docs nightly",
        workspace_id,
    )
    assert (run.status, run.trigger, run.error) == ("succeeded", "scheduled", None)
    assert (run.crawls_attempted, run.crawls_succeeded, run.crawls_empty, run.crawls_failed) == (5, 4, 0, 1)
    assert (run.documents_created, run.documents_updated, run.documents_unchanged) == (4, 0, 0)
    assert run.charged_micros == crawl["charged_micros"] == 4000
    assert run.blob_key == crawl["blob_key"]
    # A stored crawl: its rate over the crawl, and nothing of a crawl under way.
    assert run.pages_per_second == crawl["pages_per_second"] > 0 and run.rate_limited_by is None
    assert (run.crawls_total, run.eta_seconds, run.progress_at) == (None, None, None)
    assert run.created_at.utcoffset().total_seconds() == 0
    assert run.created_at <= run.started_at <= run.finished_at
    assert run.dagster_url == f"http://dagster.test/runs/{result.run_id}"
    assert history(stack, ui_base_url=None).list_runs(workspace_id).runs[0].dagster_url is None

    detail = history(stack).get_run(workspace_id, result.run_id)
    assert detail.model_dump(exclude={"steps"}) == run.model_dump()
    assert [(step.step_key, step.status, step.attempts, step.error) for step in detail.steps] == [
        ("crawl_results", "succeeded", 1, None),
        ("kb_documents", "succeeded", 1, None),
    ]
    assert all(run.started_at <= step.started_at <= step.finished_at <= run.finished_at for step in detail.steps)


def test_a_refused_run_is_failed_with_its_reason(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1), enabled=False)
    result = embedded.run(pipeline_id, workspace_id)
    assert not result.success
    reason = f"pipeline {pipeline_id} is disabled; enable it before running it"

    [run] = history(embedded).list_runs(workspace_id).runs
    assert (run.status, run.error, run.finished_at is not None) == ("failed", reason, True)
    assert (run.crawls_attempted, run.documents_created, run.blob_key, run.charged_micros) == (None, None, None, None)
    detail = history(embedded).get_run(workspace_id, run.run_id)
    assert detail.error == reason
    assert [(step.step_key, step.status, step.error) for step in detail.steps] == [("crawl_results", "failed", reason)]
    assert [r.run_id for r in history(embedded).list_runs(workspace_id, status="failed").runs] == [run.run_id]
    assert history(embedded).list_runs(workspace_id, status="succeeded").runs == []


def test_an_error_in_a_later_step_is_the_runs_error_and_the_crawl_still_counts(embedded: Stack, monkeypatch):
    import pipelines_dagster.assets.kb_documents as module

    def unreachable(*_args, **_kwargs):
        raise ConnectionError("search index unreachable")

    monkeypatch.setattr(module, "index_crawl", unreachable)
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2))
    assert not embedded.run(pipeline_id, workspace_id).success

    [run] = history(embedded).list_runs(workspace_id).runs
    assert (run.status, run.error) == ("failed", "ConnectionError: search index unreachable")
    assert (run.crawls_attempted, run.crawls_succeeded, run.documents_created) == (2, 2, None)
    steps = history(embedded).get_run(workspace_id, run.run_id).steps
    assert [(step.step_key, step.status, step.error) for step in steps] == [
        ("crawl_results", "succeeded", None),
        ("kb_documents", "failed", "ConnectionError: search index unreachable"),
    ]


def test_queued_running_and_canceled_runs(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    queued = unlaunched_run(embedded, workspace_id, pipeline_id, dg.DagsterRunStatus.QUEUED)
    started = unlaunched_run(embedded, workspace_id, pipeline_id, dg.DagsterRunStatus.NOT_STARTED)
    # What a run worker reports when it begins, and what the queue does to a run canceled in it.
    embedded.instance.report_dagster_event(
        dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=started.job_name), run_id=started.run_id
    )
    runs = {run.run_id: run for run in history(embedded).list_runs(workspace_id).runs}
    assert runs[queued.run_id].status == "queued" and runs[queued.run_id].started_at is None
    assert runs[queued.run_id].trigger == "webhook" and runs[queued.run_id].pipeline_id == pipeline_id
    assert runs[started.run_id].status == "running" and runs[started.run_id].started_at is not None
    assert runs[started.run_id].finished_at is None

    embedded.instance.report_run_canceled(queued, message="Canceling run from the queue.")
    canceled = history(embedded).get_run(workspace_id, queued.run_id)
    assert (canceled.status, canceled.error, canceled.steps) == ("canceled", None, [])
    assert canceled.finished_at is not None
    assert [r.run_id for r in history(embedded).list_runs(workspace_id, status="canceled").runs] == [queued.run_id]
    assert [r.run_id for r in history(embedded).list_runs(workspace_id, status="running").runs] == [started.run_id]


def slow_pages(stack: Stack, count: int, *, prefix: str = "/slow") -> list[str]:
    for n in range(count):
        stack.web.route(f"{prefix}{n}", page(f"Slow {n}", f"Paragraph {n}.", delay=0.8))
    return [stack.web.url(f"{prefix}{n}") for n in range(count)]


def live_view(stack: Stack, workspace_id: int, pipeline_id: int, start: Callable[[], object]) -> tuple[Any, Any]:
    """Start a run on a thread and read history while it crawls: the first view with live counts of it (listed
    and read alone), then the run's view once it has ended. A running run whose crawl is stored already (its
    later steps still going) shows its final counts, not live ones: that view is not the one looked for."""
    done = threading.Thread(target=start)
    done.start()
    runs = history(stack)

    def crawling() -> Any:
        listed = runs.list_runs(workspace_id, pipeline_id=pipeline_id).runs
        return next((run for run in listed if run.status == "running" and run.progress_at is not None), None)

    try:
        deadline = time.monotonic() + 30
        while (seen := crawling()) is None:
            assert done.is_alive() and time.monotonic() < deadline, "the crawl ended before history saw it running"
            time.sleep(0.05)
        alone = runs.get_run(workspace_id, seen.run_id, pipeline_id=pipeline_id)
    finally:
        done.join(timeout=60)
    [ended] = [run for run in runs.list_runs(workspace_id, pipeline_id=pipeline_id).runs if run.run_id == seen.run_id]
    return (seen, alone), ended


def test_a_running_crawl_shows_its_live_counts_and_once_stored_its_final_ones(embedded: Stack, monkeypatch):
    monkeypatch.setattr(run_engine, "PROGRESS_EVERY_SECONDS", 0.2)
    # Four at a time, 0.8 s each: about 2.4 s of crawling (wide enough to be seen on a loaded machine),
    # progress every 0.2 s of it.
    workspace_id, pipeline_id = embedded.pipeline(slow_pages(embedded, 12))
    (seen, alone), ended = live_view(
        embedded, workspace_id, pipeline_id, lambda: embedded.run(pipeline_id, workspace_id)
    )
    for view in (seen, alone):
        assert view.crawls_total == 12 and 0 < view.crawls_attempted <= 12
        assert view.crawls_attempted == view.crawls_succeeded + view.crawls_empty + view.crawls_failed
        assert view.pages_per_second > 0 and view.eta_seconds is not None and view.progress_at is not None
        assert view.finished_at is None and view.blob_key is None
    assert alone.crawls_attempted >= seen.crawls_attempted
    assert ended.status == "succeeded" and (ended.crawls_attempted, ended.crawls_succeeded) == (12, 12)
    assert (ended.crawls_total, ended.eta_seconds, ended.progress_at) == (None, None, None)
    assert ended.pages_per_second > 0


def test_a_batch_member_under_way_shows_its_live_counts(embedded: Stack, monkeypatch):
    monkeypatch.setattr(run_engine, "PROGRESS_EVERY_SECONDS", 0.2)
    workspace_id, first = embedded.pipeline(embedded.site(1))
    second = add_pipeline(embedded, workspace_id, slow_pages(embedded, 12, prefix="/batch"), name="slow")
    (seen, alone), ended = live_view(
        embedded, workspace_id, second, lambda: run_batch(embedded, [(workspace_id, first), (workspace_id, second)])
    )
    for view in (seen, alone):
        assert view.pipeline_id == second and view.crawls_total == 12 and view.crawls_attempted > 0
        assert view.pages_per_second > 0 and view.progress_at is not None
    assert ended.status == "succeeded" and ended.crawls_attempted == 12 and ended.progress_at is None


def test_pages_follow_the_cursor_newest_first_and_stay_put_when_runs_arrive(embedded: Stack):
    urls = embedded.site(1)
    workspace_id, first = embedded.pipeline(urls)
    second = add_pipeline(embedded, workspace_id, urls, name="second")
    created = [embedded.run(pipeline_id, workspace_id).run_id for pipeline_id in (first, first, second, first, second)]
    newest_first = created[::-1]
    runs = history(embedded)

    pages, cursors, cursor = [], [], None
    while True:
        page = runs.list_runs(workspace_id, limit=2, cursor=cursor)
        pages.append([run.run_id for run in page.runs])
        if (cursor := page.next_cursor) is None:
            break
        cursors.append(cursor)
    assert pages == [newest_first[:2], newest_first[2:4], newest_first[4:]]

    embedded.run(first, workspace_id)
    assert [run.run_id for run in runs.list_runs(workspace_id, limit=2, cursor=cursors[0]).runs] == pages[1]
    assert [run.run_id for run in runs.list_runs(workspace_id, pipeline_id=second).runs] == [created[4], created[2]]


def test_limit_and_arguments_are_checked(embedded: Stack):
    runs = history(embedded)
    for limit in (0, 101):
        with pytest.raises(ValueError, match="between 1 and 100"):
            runs.list_runs(1, limit=limit)
    with pytest.raises(ValueError, match="status must be one of queued, running, succeeded, failed, canceled"):
        runs.list_runs(1, status="SUCCESS")
    assert runs.list_runs(1, limit=100).runs == []


def test_another_workspaces_runs_are_never_seen(embedded: Stack):
    urls = embedded.site(1)
    ours, our_pipeline = embedded.pipeline(urls)
    theirs, their_pipeline = embedded.pipeline(urls)
    our_run = embedded.run(our_pipeline, ours).run_id
    their_run = embedded.run(their_pipeline, theirs).run_id
    runs = history(embedded)

    assert [run.run_id for run in runs.list_runs(ours).runs] == [our_run]
    assert runs.list_runs(ours, pipeline_id=their_pipeline).runs == []
    assert runs.get_run(ours, their_run) is None
    assert runs.get_run(ours, "no-such-run") is None
    assert runs.get_run(theirs, their_run).workspace_id == theirs
    # Their run as a cursor positions our page; it never lets their runs in.
    assert [run.run_id for run in runs.list_runs(ours, cursor=their_run).runs] == [our_run]


def test_a_ui_launch_belongs_to_its_partitions_workspace(embedded: Stack):
    urls = embedded.site(1)
    workspace_id, pipeline_id = embedded.pipeline(urls)
    other_workspace, _ = embedded.pipeline(urls)
    # The launchpad adds only the partition to the job's own tags.
    ui_run = dg.materialize(
        [crawl_results, kb_documents],
        partition_key=embedded.key(pipeline_id),
        instance=embedded.instance,
        resources=embedded.resources(),
        tags=pipeline_run.tags,
    ).run_id
    tagged_run = embedded.run(pipeline_id, workspace_id).run_id
    runs = history(embedded)

    listed = runs.list_runs(workspace_id).runs
    assert [run.run_id for run in listed] == [tagged_run, ui_run]
    assert (listed[1].pipeline_id, listed[1].workspace_id, listed[1].trigger) == (pipeline_id, workspace_id, "manual")
    assert (listed[1].status, listed[1].crawls_succeeded) == ("succeeded", 1)
    assert [run.run_id for run in runs.list_runs(workspace_id, pipeline_id=pipeline_id).runs] == [tagged_run, ui_run]
    assert runs.get_run(workspace_id, ui_run).pipeline_name == "p"
    assert runs.get_run(other_workspace, ui_run) is None
    assert runs.list_runs(other_workspace).runs == []


def test_storage_queries_per_page_do_not_grow_with_the_page(embedded: Stack):
    urls = embedded.site(1)
    workspace_id, pipeline_id = embedded.pipeline(urls)
    refused = add_pipeline(embedded, workspace_id, urls, name="refused", enabled=False)
    for _ in range(4):
        assert embedded.run(pipeline_id, workspace_id).success
    assert not embedded.run(refused, workspace_id).success
    assert embedded.run(pipeline_id, workspace_id).success
    runs = history(embedded)

    def queries(**page) -> tuple[int, int]:
        with counted_queries() as counts:
            listed = runs.list_runs(workspace_id, **page).runs
        assert {run.status for run in listed} == {"succeeded", "failed"}
        return counts.pop(embedded.engine, 0), sum(counts.values())

    small, large = queries(limit=2), queries(limit=6)
    assert small == large
    # App DB: the names and the ledger's charges. Dagster: three run queries (tagged runs, batch
    # runs, UI launches), two materialization queries (each with its asset-key lookup) and one for
    # the failures.
    assert small == (2, 8)


def test_each_pipeline_of_a_batch_run_is_an_entry_of_its_own(stack: Stack):
    stack.billing_enabled = True
    urls = stack.site(2)
    workspace_id, first = stack.pipeline(urls, credit=100_000)
    second = add_pipeline(
        stack, workspace_id, [*urls, *stack.site(3, prefix="/more"), stack.web.url("/missing")], name="second"
    )
    refused = add_pipeline(stack, workspace_id, urls, name="refused", enabled=False)
    other_workspace, theirs = stack.pipeline(urls, credit=100_000)
    result = run_batch(
        stack, [(workspace_id, first), (other_workspace, theirs), (workspace_id, second), (workspace_id, refused)]
    )
    assert not result.success  # the refused pipeline failed the run, alone
    runs = history(stack)

    listed = runs.list_runs(workspace_id).runs
    assert [(run.run_id, run.pipeline_id) for run in listed] == [
        (result.run_id, first),
        (result.run_id, second),
        (result.run_id, refused),
    ]
    by_pipeline = {run.pipeline_id: run for run in listed}
    ok = by_pipeline[first]
    assert (ok.status, ok.trigger, ok.error, ok.pipeline_name) == ("succeeded", "scheduled", None, "p")
    assert (ok.crawls_attempted, ok.crawls_succeeded, ok.documents_created, ok.charged_micros) == (2, 2, 2, 2000)
    assert ok.blob_key.endswith(f"/{first}/{result.run_id}/result.jsonl")
    assert ok.created_at <= ok.started_at <= ok.finished_at
    assert (by_pipeline[second].crawls_attempted, by_pipeline[second].crawls_failed) == (6, 1)
    assert by_pipeline[second].status == "succeeded"
    bad = by_pipeline[refused]
    assert (bad.status, bad.error) == ("failed", f"pipeline {refused} is disabled; enable it before running it")
    assert (bad.crawls_attempted, bad.blob_key, bad.charged_micros) == (None, None, None)
    assert ok.finished_at <= bad.started_at <= bad.finished_at  # it ran after the first

    assert [run.pipeline_id for run in runs.list_runs(workspace_id, status="failed").runs] == [refused]
    assert [run.pipeline_id for run in runs.list_runs(workspace_id, status="succeeded").runs] == [first, second]
    assert [run.pipeline_id for run in runs.list_runs(workspace_id, pipeline_id=second).runs] == [second]
    # Another workspace sees only its own pipeline of the same run.
    assert [run.pipeline_id for run in runs.list_runs(other_workspace).runs] == [theirs]
    assert runs.get_run(other_workspace, result.run_id, pipeline_id=first) is None

    detail = runs.get_run(workspace_id, result.run_id, pipeline_id=second)
    assert detail.model_dump(exclude={"steps"}) == by_pipeline[second].model_dump()
    assert [(step.step_key, step.status, step.error) for step in detail.steps] == [
        ("crawl_results", "succeeded", None),
        ("kb_documents", "succeeded", None),
        ("page_changes", "succeeded", None),
    ]
    assert all(detail.started_at <= step.started_at <= step.finished_at <= detail.finished_at for step in detail.steps)
    refused_detail = runs.get_run(workspace_id, result.run_id, pipeline_id=refused)
    assert [(step.step_key, step.status) for step in refused_detail.steps] == [("crawl_results", "failed")]


def test_pages_of_batch_entries_follow_the_cursor_inside_a_run(embedded: Stack):
    urls = embedded.site(1)
    workspace_id, first = embedded.pipeline(urls)
    others = [add_pipeline(embedded, workspace_id, urls, name=f"p{n}") for n in range(3)]
    single = embedded.run(first, workspace_id).run_id
    batch = run_batch(embedded, [(workspace_id, pipeline_id) for pipeline_id in others]).run_id
    runs = history(embedded)

    pages, cursor = [], None
    while True:
        page = runs.list_runs(workspace_id, limit=2, cursor=cursor)
        pages.append([(run.run_id, run.pipeline_id) for run in page.runs])
        if (cursor := page.next_cursor) is None:
            break
    assert pages == [[(batch, others[0]), (batch, others[1])], [(batch, others[2]), (single, first)]]


def test_a_batch_run_that_died_fails_the_pipelines_it_had_not_finished(embedded: Stack, monkeypatch):
    from dagster._core.errors import DagsterExecutionInterruptedError

    import pipelines_dagster.batch as batch

    urls = embedded.site(1)
    workspace_id, done = embedded.pipeline(urls)
    pending = add_pipeline(embedded, workspace_id, urls, name="pending")
    real = batch.crawl_partition

    def dies_at_the_second(instance, run, partition_key, **kwargs):
        if partition_key == embedded.key(pending):  # as when the run's process is stopped mid-batch
            raise DagsterExecutionInterruptedError("the run was terminated")
        return real(instance, run, partition_key, **kwargs)

    monkeypatch.setattr(batch, "crawl_partition", dies_at_the_second)
    result = run_batch(embedded, [(workspace_id, done), (workspace_id, pending)])
    assert not result.success
    listed = {run.pipeline_id: run for run in history(embedded).list_runs(workspace_id).runs}
    assert (listed[done].status, listed[done].crawls_attempted) == ("succeeded", 1)
    assert (listed[pending].status, listed[pending].crawls_attempted) == ("failed", None)
    assert listed[pending].error and listed[pending].finished_at is not None


def test_a_runs_entries_are_read_at_once_whatever_the_number_of_its_pipelines(embedded: Stack):
    """The run-status sensors read each ended run once: a batch run's pipelines share its reads."""
    urls = embedded.site(1)
    workspace_id, first = embedded.pipeline(urls)
    others = [add_pipeline(embedded, workspace_id, urls, name=f"p{n}") for n in range(4)]
    other_workspace, theirs = embedded.pipeline(urls)
    alone = run_batch(embedded, [(workspace_id, first)])
    many = run_batch(embedded, [(workspace_id, first), (other_workspace, theirs), *((workspace_id, p) for p in others)])
    single = embedded.run(first, workspace_id)
    runs = history(embedded)

    def reads(run_id: str) -> tuple[list, int]:
        with counted_queries() as counts:
            views = runs.run_views(run_id)
        return views, sum(counts.values())

    (one_view, one), (views, batch) = reads(alone.run_id), reads(many.run_id)
    assert sorted(view.pipeline_id for view in views) == sorted([first, theirs, *others])
    assert {view.workspace_id for view in views} == {workspace_id, other_workspace}
    assert {view.status for view in [*one_view, *views]} == {"succeeded"}
    assert one == batch  # not one set of reads per pipeline
    # Each entry is what the run's page shows for that pipeline.
    for view in views:
        detail = runs.get_run(view.workspace_id, many.run_id, pipeline_id=view.pipeline_id)
        assert detail.model_dump(exclude={"steps"}) == view.model_dump()
    [view], single_reads = reads(single.run_id)
    assert view.model_dump() == runs.get_run(workspace_id, single.run_id).model_dump(exclude={"steps"})
    assert single_reads <= batch


def test_a_run_of_a_deleted_pipeline_has_no_entry(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    run = embedded.run(pipeline_id, workspace_id)
    with transaction(embedded.sessions) as session:
        session.delete(session.get(Pipeline, pipeline_id))
    assert history(embedded).run_views(run.run_id) == []
    assert history(embedded).run_views("no-such-run") == []
