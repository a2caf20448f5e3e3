"""Every launch a Dagster user can make on a pipeline's partition, through `dagster dev` on the embedded default.

Runs are launched as the UI launches them (GraphQL): crawl_results alone from its asset page (what
the README tells a newcomer to do), the whole asset graph, the pipeline_run launchpad, a backfill,
and a re-execution of only the crawl step from the run page. Each leaves the pipeline's documents
and page changes with its crawl, one charge, and the run contract's tags; a UI launch is busy for
the schedule sensor while queued or running, and the lock-release sensor frees what it left when
its process died. A manual trigger switched off refuses run-now, not these operators' launches.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Document, PageChange
from pipelines_dagster.core.catalog.triggers import create_event_trigger, pipeline_triggers, set_trigger_enabled
from pipelines_dagster.core.run.plan import RunRefused
from pipelines_dagster.core.storage.locks import DatabaseLocks, connector_lock_name, pipeline_lock_name
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.launch import GraphQLLauncher, PipelineBusyError, launch_pipeline_run
from pipelines_dagster.runs import batch_tags, pipeline_ids_of
from pipelines_dagster.sensors.common import BUSY, busy_pipelines
from tests.support import ledger
from tests.support.dagster_dev import Dev, Seeded, dagster_dev, seed, wait_for
from tests.support.graphql import BACKFILL, LAUNCH, REEXECUTE
from tests.support.web import page
from tests.support.webhooks import create_webhook, deliver

pytestmark = pytest.mark.integration

REPOSITORY = {"repositoryLocationName": "pipelines_dagster", "repositoryName": "__repository__"}
ASSET_JOB = "__ASSET_JOB"
ALL_ASSETS = ["crawl_results", "kb_documents", "page_changes"]
# The UI launches an asset's checks with it.
CHECKS = {
    "crawl_results": [("crawl_results", "crawl_success_ratio"), ("crawl_results", "crawl_blob_readable")],
    "kb_documents": [("kb_documents", "kb_documents_have_content")],
    "page_changes": [],
}
RUN_WITHIN_SECONDS = 120.0
# The lock-release sensor ticks every 10 s; two ticks and some.
LOCKS_FREED_WITHIN_SECONDS = 30.0


@pytest.fixture(scope="module")
def dev(tmp_path_factory) -> Iterator[Dev]:
    """One `dagster dev` for every launch path: each test has pipelines, and so partitions, of its own."""
    with dagster_dev(tmp_path_factory.mktemp("launch-paths")) as deployment:
        yield deployment


def _tags(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"key": key, "value": value} for key, value in tags.items()]


def _run_id(answer: dict) -> str:
    assert answer["__typename"] == "LaunchRunSuccess", answer
    return answer["run"]["runId"]


def launch(dev: Dev, pipeline_id: int, *, job: str = ASSET_JOB, assets: list[str] | None = None, **tags: str) -> str:
    """A run launched as the UI launches one partition: from an asset page or the asset graph (the asset
    job over the selected assets and their checks), or from a job's launchpad (no selection)."""
    selector: dict = {**REPOSITORY, "pipelineName": job}
    if assets is not None:
        selector["assetSelection"] = [{"path": [asset]} for asset in assets]
        selector["assetCheckSelection"] = [
            {"assetKey": {"path": [asset_name]}, "name": check}
            for asset in assets
            for asset_name, check in CHECKS[asset]
        ]
    params = {
        "mode": "default",
        "runConfigData": "{}",
        "selector": selector,
        "executionMetadata": {"tags": _tags({"dagster/partition": dev.key(pipeline_id), **tags})},
    }
    return _run_id(dev.graphql(LAUNCH, executionParams=params)["launchPipelineExecution"])


def reexecute_step(dev: Dev, parent: dg.DagsterRun, step: str) -> str:
    """Re-execute one step of a finished run, as the run page's "Re-execute selected" sends it."""
    root = parent.root_run_id or parent.run_id
    tags = {key: value for key, value in parent.tags.items() if key not in ("dagster/step_selection",)}
    tags |= {"dagster/parent_run_id": parent.run_id, "dagster/root_run_id": root, "dagster/step_selection": step}
    params = {
        "mode": "default",
        "runConfigData": "{}",
        "selector": {**REPOSITORY, "pipelineName": parent.job_name, "assetSelection": [], "assetCheckSelection": []},
        "stepKeys": [step],
        "executionMetadata": {"parentRunId": parent.run_id, "rootRunId": root, "tags": _tags(tags)},
    }
    return _run_id(dev.graphql(REEXECUTE, executionParams=params)["launchPipelineReexecution"])


def finished(dev: Dev, run_id: str) -> dg.DagsterRun:
    return wait_for(f"run {run_id} to end", lambda: dev.ended(run_id), timeout=RUN_WITHIN_SECONDS, every=0.5)


def charges(dev: Dev, workspace_id: int) -> list[str]:
    return ledger.charges(dev.sessions, workspace_id)


def documents(dev: Dev, pipeline_id: int) -> dict[str, str]:
    """URL → content of the pipeline's ready documents."""
    with dev.sessions() as session:
        return dict(
            session.execute(
                sa.select(Document.url, Document.content).where(
                    Document.pipeline_id == pipeline_id, Document.status_state == "ready"
                )
            ).all()
        )


def page_changes(dev: Dev, pipeline_id: int, run_id: str) -> dict[str, str]:
    """URL → change the crawl of `run_id` recorded on the pipeline's timeline."""
    with dev.sessions() as session:
        return dict(
            session.execute(
                sa.select(PageChange.url, PageChange.status).where(
                    PageChange.pipeline_id == pipeline_id, PageChange.run_id == run_id
                )
            ).all()
        )


def assert_follows_its_crawl(dev: Dev, run: dg.DagsterRun, seeded: Seeded) -> None:
    """The run succeeded, carries the run contract's tags, and its crawl's documents and page changes landed."""
    assert run.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()
    assert (run.tags.get("pipeline_id"), run.tags.get("workspace_id"), run.tags.get("trigger")) == (
        str(seeded.pipeline_id),
        str(seeded.workspace_id),
        "manual",
    ), run.tags
    assert sorted(documents(dev, seeded.pipeline_id)) == (sorted(seeded.urls) if seeded.save_to_kb else [])
    assert page_changes(dev, seeded.pipeline_id, run.run_id) == dict.fromkeys(seeded.urls, "new")
    assert charges(dev, seeded.workspace_id) == [f"crawl:{run.run_id}:{seeded.pipeline_id}"]


def test_materializing_crawl_results_from_its_asset_page_as_the_readme_says_lands_documents(dev: Dev):
    seeded = seed(dev, "assetpage")
    run = finished(dev, launch(dev, seeded.pipeline_id, assets=["crawl_results"]))
    assert run.asset_selection == {dg.AssetKey("crawl_results")}
    assert_follows_its_crawl(dev, run, seeded)


def test_a_ui_launch_runs_a_partition_whose_manual_trigger_is_off_which_run_now_refuses(dev: Dev):
    seeded = seed(dev, "manualoff")
    with transaction(dev.sessions) as session:
        triggers = pipeline_triggers(session, workspace_id=seeded.workspace_id, pipeline_id=seeded.pipeline_id)
        [manual] = [trigger.id for trigger in triggers if trigger.kind == "manual"]
        set_trigger_enabled(
            session, workspace_id=seeded.workspace_id, pipeline_id=seeded.pipeline_id, trigger_id=manual, enabled=False
        )
    with pytest.raises(RunRefused, match=f"pipeline {seeded.pipeline_id} has no enabled manual trigger"):
        launch_pipeline_run(
            dev.sessions,
            workspace_id=seeded.workspace_id,
            pipeline_id=seeded.pipeline_id,
            launcher=GraphQLLauncher(dev.ui_url),
        )
    run = finished(dev, launch(dev, seeded.pipeline_id, assets=["crawl_results"]))
    assert_follows_its_crawl(dev, run, seeded)


def test_materializing_the_whole_asset_graph(dev: Dev):
    seeded = seed(dev, "graph")
    run = finished(dev, launch(dev, seeded.pipeline_id, assets=ALL_ASSETS))
    assert_follows_its_crawl(dev, run, seeded)


def test_the_pipeline_run_launchpad_and_a_reexecution_of_only_its_crawl_step(dev: Dev):
    seeded = seed(dev, "launchpad")
    first = finished(dev, launch(dev, seeded.pipeline_id, job="pipeline_run"))
    assert_follows_its_crawl(dev, first, seeded)

    # The page changes, and the crawl step alone is re-executed from the run page: its run plans no
    # kb_documents or page_changes step, so the crawl step updates the document and the timeline.
    dev.site.route("/launchpad/0", page("launchpad 0", "Page 0 of launchpad, rewritten."))
    again = finished(dev, reexecute_step(dev, first, "crawl_results"))
    assert again.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()
    assert (again.root_run_id, again.step_keys_to_execute) == (first.run_id, ["crawl_results"])
    assert again.tags["pipeline_id"] == str(seeded.pipeline_id) and again.tags["trigger"] == "manual"
    assert "rewritten" in documents(dev, seeded.pipeline_id)[seeded.urls[0]]
    assert page_changes(dev, seeded.pipeline_id, again.run_id) == {seeded.urls[0]: "changed"}
    # Crawled again, charged once: the charge is keyed by the root run.
    assert dev.site.hits("/launchpad/1") == 2
    assert charges(dev, seeded.workspace_id) == [f"crawl:{first.run_id}:{seeded.pipeline_id}"]


def test_a_backfill_of_crawl_results_over_two_partitions(dev: Dev):
    kb, raw = seed(dev, "backfillkb"), seed(dev, "backfillraw", save_to_kb=False)
    params = {
        "assetSelection": [{"path": ["crawl_results"]}],
        "partitionNames": [kb.partition_key, raw.partition_key],
        "fromFailure": False,
        "tags": [],
    }
    answer = dev.graphql(BACKFILL, params=params)["launchPartitionBackfill"]
    assert answer["__typename"] == "LaunchBackfillSuccess", answer

    def runs() -> dict[str, dg.DagsterRun] | None:
        found = dev.instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": answer["backfillId"]}))
        return {run.tags["dagster/partition"]: run for run in found} if len(found) == 2 else None

    by_partition = wait_for("the backfill's two runs", runs, timeout=RUN_WITHIN_SECONDS, every=0.5)
    for seeded in (kb, raw):
        assert_follows_its_crawl(dev, finished(dev, by_partition[seeded.partition_key].run_id), seeded)


def test_a_ui_launch_is_busy_while_queued_or_running_and_the_sensor_frees_its_locks_when_it_dies(dev: Dev):
    seeded = seed(dev, "killed", pages=10, delay=2.0)
    # A retried run would take the dead run's locks over itself (see test_e2e_run_crash.py); this one
    # is not retried, so only the lock-release sensor can free them.
    run_id = launch(dev, seeded.pipeline_id, assets=["crawl_results"], **{"dagster/max_retries": "0"})
    seen = {dev.instance.get_run_by_id(run_id).status}
    assert seeded.pipeline_id in busy_pipelines(dev.instance)
    locks = DatabaseLocks(dev.engine)
    names = [pipeline_lock_name(seeded.pipeline_id), connector_lock_name(seeded.connector_id)]

    def crawling() -> int | None:
        seen.add(dev.instance.get_run_by_id(run_id).status)
        locked = all(locks.owner_of(name) == run_id for name in names)
        return dev.run_pid(run_id) if locked and dev.site.hits("/killed/0") else None

    pid = wait_for("the run to be crawling", crawling, timeout=RUN_WITHIN_SECONDS)
    assert seeded.pipeline_id in busy_pipelines(dev.instance)
    assert dg.DagsterRunStatus.STARTED in seen and seen <= set(BUSY), seen
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    run = dev.failed(run_id, timeout=RUN_WITHIN_SECONDS)
    assert run.tags["dagster/will_retry"] == "false"
    assert (run.tags["pipeline_id"], run.tags["workspace_id"]) == (str(seeded.pipeline_id), str(seeded.workspace_id))
    wait_for(
        "the lock-release sensor to free the dead run's locks",
        lambda: all(locks.owner_of(name) is None for name in names),
        timeout=LOCKS_FREED_WITHIN_SECONDS - (time.monotonic() - killed),
        every=0.5,
    )
    assert seeded.pipeline_id not in busy_pipelines(dev.instance)
    assert charges(dev, seeded.workspace_id) == []


def test_a_refused_ui_launch_fails_once_with_the_reason_and_is_not_retried(dev: Dev):
    seeded = seed(dev, "refused", enabled=False)
    run = dev.failed(launch(dev, seeded.pipeline_id, assets=["crawl_results"]), timeout=RUN_WITHIN_SECONDS)
    # A guard's refusal is a step failure: the run-retry settings leave it to the step, which does not retry it.
    assert run.tags["dagster/failure_reason"] == "STEP_FAILURE" and run.tags["dagster/will_retry"] == "false"
    assert run.tags["trigger"] == "manual"
    assert dev.instance.get_runs(dg.RunsFilter(tags={"dagster/parent_run_id": run.run_id})) == []
    assert dev.site.hits("/refused/0") == 0 and charges(dev, seeded.workspace_id) == []


def test_a_webhook_and_an_event_for_a_pipeline_a_running_batch_holds_run_after_it_once_and_run_now_is_a_409(
    dev: Dev,
):
    """The run queue limits a pipeline's own runs, not a batch run that covers it: the trigger sensors
    leave such a pipeline's delivery and event pending while the batch runs, and start their runs after it."""
    held, other = seed(dev, "batched", pages=1, delay=10.0), seed(dev, "batchmate")
    with transaction(dev.sessions) as session:
        hook = create_webhook(session, workspace_id=held.workspace_id, pipeline_id=held.pipeline_id)
        create_event_trigger(
            session, workspace_id=held.workspace_id, pipeline_id=held.pipeline_id, event_type="folder.changed"
        )
    members = [(held.pipeline_id, held.workspace_id), (other.pipeline_id, other.workspace_id)]
    config = {"pipelines": [{"pipeline_id": p, "workspace_id": w} for p, w in members]}
    params = {
        "mode": "default",
        "runConfigData": {"ops": {"run_pipelines": {"config": config}}},
        "selector": {**REPOSITORY, "pipelineName": "pipeline_batch"},
        "executionMetadata": {"tags": _tags(batch_tags(members, trigger="manual"))},
    }
    batch_id = _run_id(dev.graphql(LAUNCH, executionParams=params)["launchPipelineExecution"])
    wait_for("the batch to crawl the held pipeline", lambda: dev.site.hits("/batched/0"), timeout=RUN_WITHIN_SECONDS)

    with transaction(dev.sessions) as session:
        delivery_id = deliver(session, hook, b'{"ref": "main"}')
        event_id = emit_event(session, workspace_id=held.workspace_id, event_type="folder.changed").id
    with pytest.raises(PipelineBusyError, match=f"run {batch_id} \\(pipeline_batch, started\\)"):
        launch_pipeline_run(
            dev.sessions,
            workspace_id=held.workspace_id,
            pipeline_id=held.pipeline_id,
            launcher=GraphQLLauncher(dev.ui_url),
        )

    batch = finished(dev, batch_id)
    assert batch.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()
    batch_ended = dev.instance.get_run_record_by_id(batch_id).end_time

    def fired() -> list[dg.DagsterRun] | None:
        runs = [
            dev.instance.get_runs(dg.RunsFilter(tags={"webhook_delivery_id": str(delivery_id)})),
            dev.instance.get_runs(dg.RunsFilter(tags={"event_id": str(event_id)})),
        ]
        done = all(len(found) == 1 and found[0].is_finished for found in runs)
        return [found[0] for found in runs] if done else None

    webhook_run, event_run = wait_for("the webhook's and the event's runs", fired, timeout=RUN_WITHIN_SECONDS * 2)
    for run in (webhook_run, event_run):
        assert run.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()
        assert run.tags["pipeline_id"] == str(held.pipeline_id)
        # Created once the batch had ended: the sensors held the fires back, the crawl step did not wait.
        assert dev.instance.get_run_record_by_id(run.run_id).create_timestamp.timestamp() >= batch_ended
    # A tick later, nothing more: each fire ran once.
    time.sleep(6)
    runs_of_held = dev.instance.get_runs(dg.RunsFilter(tags={"pipeline_id": str(held.pipeline_id)}))
    assert sorted(run.run_id for run in runs_of_held) == sorted([webhook_run.run_id, event_run.run_id])
    assert not [
        run
        for run in dev.instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        if held.pipeline_id in pipeline_ids_of(run.tags)
    ]
    # The batch's crawl and one each after it.
    assert dev.site.hits("/batched/0") == 3
    assert len(charges(dev, held.workspace_id)) == 3
