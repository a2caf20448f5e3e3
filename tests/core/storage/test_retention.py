"""Retention: old crawl blobs go, each pipeline's latest stays; old webhook deliveries go."""

from __future__ import annotations

import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import (
    NotificationAttempt,
    NotificationDelivery,
    NotificationEndpoint,
    Pipeline,
    PipelineTrigger,
    WebhookDelivery,
)
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.storage.blob import BlobStore, run_result_key
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore
from pipelines_dagster.core.storage.retention import (
    ABANDONED_WRITE_AGE,
    apply_retention,
    cutoff,
    prune_crawl_blobs,
    prune_notification_deliveries,
    prune_webhook_deliveries,
)
from pipelines_dagster.core.storage.s3_blobs import S3_MIN_PART_SIZE, S3BlobStore
from pipelines_dagster.schedules import RetentionConfig, build_maintenance_schedule, maintenance
from tests.assets.conftest import embedded, materialization, web  # noqa: F401  (fixtures)
from tests.support.processes import kill_when_it_says

NOW = datetime.now(UTC)
REPO_DIR = Path(__file__).resolve().parents[3]
# moto stamps every multipart upload as initiated at this instant, whenever it began.
MOTO_INITIATED = datetime(2010, 11, 10, 20, 48, 33, tzinfo=UTC)


def write(store, workspace_id: int, pipeline_id: int, run_id: str) -> str:
    key = run_result_key(workspace_id=workspace_id, pipeline_id=pipeline_id, run_id=run_id)
    store.write_jsonl(key, [{"url": "https://x.test/", "status": "success"}])
    return key


def age(root: Path, key: str, days: float) -> None:
    stamp = (NOW - timedelta(days=days)).timestamp()
    os.utime(root / key, (stamp, stamp))


def test_old_blobs_are_deleted_and_each_pipelines_latest_kept(tmp_path):
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    ages = {
        ("1", "10", "old-a"): 90,
        ("1", "10", "old-b"): 40,
        ("1", "10", "new"): 2,
        ("1", "11", "only"): 400,
        ("2", "20", "old"): 60,
        ("2", "20", "latest-but-old"): 31,
        ("2", "21", "recent-a"): 5,
        ("2", "21", "recent-b"): 1,
    }
    keys = {}
    for (ws, pipeline, run), days in ages.items():
        keys[run, pipeline] = write(store, int(ws), int(pipeline), run)
        age(root, keys[run, pipeline], days)
    store.write_stream("pipeline_runs/elsewhere.txt", [b"not a run result"])
    deleted, kept = prune_crawl_blobs(store, older_than=cutoff(NOW, 30))
    assert sorted(deleted) == sorted([keys["old-a", "10"], keys["old-b", "10"], keys["old", "20"]])
    assert kept == 5
    left = {blob.key for blob in store.list("pipeline_runs/")}
    assert left == {
        keys["new", "10"],
        keys["only", "11"],
        keys["latest-but-old", "20"],
        keys["recent-a", "21"],
        keys["recent-b", "21"],
        "pipeline_runs/elsewhere.txt",
    }


def test_a_key_the_event_log_names_as_latest_is_kept_whatever_its_age(tmp_path):
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    named, newer = write(store, 1, 10, "named"), write(store, 1, 10, "newer")
    age(root, named, 50)
    age(root, newer, 45)
    assert prune_crawl_blobs(store, older_than=cutoff(NOW, 30), keep={named}) == ([], 2)


def test_on_s3_the_older_blob_goes_and_the_latest_stays(s3_bucket, s3_endpoint_url):
    store = S3BlobStore(s3_bucket, "retention", endpoint_url=s3_endpoint_url)
    old = write(store, 1, 10, "old")
    time.sleep(1.1)  # S3 stamps whole seconds
    new = write(store, 1, 10, "new")
    deleted, kept = prune_crawl_blobs(store, older_than=datetime.now(UTC) + timedelta(days=1))
    assert (deleted, kept) == ([old], 1)
    assert [blob.key for blob in store.list("pipeline_runs/")] == [new]


def test_retention_is_at_least_a_day():
    with pytest.raises(ValueError, match="at least 1 day"):
        cutoff(NOW, 0)


def unfinished_writes(store: BlobStore) -> list[int]:
    """The sizes of the temp files (local) or the parts of the multipart uploads (S3) of unfinished writes."""
    if isinstance(store, LocalBlobStore):
        return [path.stat().st_size for path in store.root.rglob(".*.tmp")]
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix).get("Uploads", [])
    parts = (store.client.list_parts(Bucket=store.bucket, Key=u["Key"], UploadId=u["UploadId"]) for u in uploads)
    return [part["Size"] for listed in parts for part in listed.get("Parts", [])]


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_write_killed_mid_object_is_removed_by_retention_once_no_live_run_can_own_it(
    backend, request, sqlite_engine, tmp_path
):
    if backend == "local":
        where = ["local", str(tmp_path / "blobs")]
        store: BlobStore = LocalBlobStore(where[1])
        begun = datetime.now(UTC)
    else:
        endpoint, bucket = request.getfixturevalue("s3_endpoint_url"), request.getfixturevalue("s3_bucket")
        where = ["s3", endpoint, bucket, "retention"]
        store = S3BlobStore(bucket, "retention", endpoint_url=endpoint)
        begun = MOTO_INITIATED
    key = run_result_key(workspace_id=1, pipeline_id=10, run_id="killed")
    command = [sys.executable, "-m", "tests.core.storage.killed_write", key, *where]
    kill_when_it_says(command, b"writing\n", env=dict(os.environ), cwd=REPO_DIR, log=tmp_path / "write.log")
    assert unfinished_writes(store) == [S3_MIN_PART_SIZE] and not store.exists(key)
    sessions = session_factory(sqlite_engine)

    # A day on it may be a long run's write still going: kept.
    report = apply_retention(store, sessions, now=begun + timedelta(days=1), days=30)
    assert report.abandoned_writes_removed == 0 and unfinished_writes(store) == [S3_MIN_PART_SIZE]
    report = apply_retention(store, sessions, now=begun + ABANDONED_WRITE_AGE + timedelta(minutes=1), days=30)
    assert report.abandoned_writes_removed == 1 and unfinished_writes(store) == []


@pytest.fixture
def trigger(sessions) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="owner").workspace
        pipeline = Pipeline(workspace_id=workspace.id, name="p")
        session.add(pipeline)
        session.flush()
        made = PipelineTrigger(workspace_id=workspace.id, pipeline_id=pipeline.id, kind="webhook")
        session.add(made)
        session.flush()
        return workspace.id, made.id


def test_old_webhook_deliveries_are_pruned(sessions, trigger):
    workspace_id, trigger_id = trigger
    with transaction(sessions) as session:
        for n, days in enumerate([45, 31, 29, 0]):
            session.add(
                WebhookDelivery(
                    workspace_id=workspace_id,
                    trigger_id=trigger_id,
                    dedupe_key=f"d{n}",
                    payload=b"{}",
                    received_at=NOW - timedelta(days=days),
                )
            )
    # The PostgreSQL database is shared by the session's tests: other workspaces' deliveries count too.
    assert prune_webhook_deliveries(sessions, older_than=cutoff(NOW, 30)) >= 2
    with sessions() as session:
        left = session.scalars(sa.select(WebhookDelivery.dedupe_key).where(WebhookDelivery.trigger_id == trigger_id))
        assert sorted(left) == ["d2", "d3"]


def test_apply_retention_reports_both(sessions, trigger, tmp_path):
    workspace_id, trigger_id = trigger
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    old, latest = write(store, 1, 10, "old"), write(store, 1, 10, "latest")
    age(root, old, 10)
    age(root, latest, 9)
    with transaction(sessions) as session:
        session.add(
            WebhookDelivery(
                workspace_id=workspace_id,
                trigger_id=trigger_id,
                dedupe_key="d",
                payload=b"{}",
                received_at=NOW - timedelta(days=8),
            )
        )
    report = apply_retention(store, sessions, now=NOW, days=7)
    assert (report.blobs_deleted, report.blobs_kept) == ([old], 1) and report.deliveries_deleted >= 1
    with sessions() as session:
        assert session.scalar(sa.select(WebhookDelivery.id).where(WebhookDelivery.trigger_id == trigger_id)) is None


def test_the_daily_maintenance_job_keeps_the_latest_crawl(embedded, tmp_path):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    crawls = [embedded.run(pipeline_id, workspace_id) for _ in range(3)]
    keys = [materialization(crawl, "crawl_results")["blob_key"] for crawl in crawls]
    root = Path(embedded.blob_store.root)
    # The latest crawl's blob looks older than the one before: only the event log says it is the latest.
    for key, days in zip(keys, [60, 40, 50], strict=True):
        age(root, key, days)
    # What a run killed mid-write nine days ago left.
    abandoned = f"{keys[0].rpartition('/')[0]}/.result.jsonl.k1ll3d_x.tmp"
    (root / abandoned).write_bytes(b"x")
    age(root, abandoned, 9)
    result = maintenance.execute_in_process(
        instance=embedded.instance,
        resources={key: embedded.resources()[key] for key in ("app_db", "blob_store", "billing")},
        run_config=dg.RunConfig(ops={"apply_retention_op": RetentionConfig(retention_days=30)}),
    )
    assert result.success
    assert {blob.key for blob in embedded.blob.list("pipeline_runs/")} == {keys[1], keys[2]}
    [output] = [event for event in result.all_events if event.is_successful_output]
    assert output.event_specific_data.metadata["abandoned_writes_removed"].value == 1
    assert not (root / abandoned).exists()


def test_the_daily_maintenance_job_releases_the_holds_of_ended_runs_only(embedded):
    embedded.billing_enabled = True
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1), credit=9000)
    resources = embedded.resources()
    billing = resources["billing"]
    ended, running = (
        embedded.instance.add_run(dg.DagsterRun(job_name="pipeline_run", run_id=str(uuid.uuid4()), status=status))
        for status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.STARTED)
    )
    for run in (ended, running):
        billing.reserve(workspace_id, 3, idempotency_key=f"{run.run_id}:{pipeline_id}", run_id=run.run_id)
    # A run Dagster no longer knows (deleted from its storage) holds nothing either.
    billing.reserve(workspace_id, 3, idempotency_key=f"gone:{pipeline_id}", run_id="a-deleted-run")
    result = maintenance.execute_in_process(
        instance=embedded.instance,
        resources={key: resources[key] for key in ("app_db", "blob_store", "billing")},
        run_config=dg.RunConfig(ops={"apply_retention_op": RetentionConfig(retention_days=30)}),
    )
    assert result.success
    [output] = [event for event in result.all_events if event.is_successful_output]
    assert output.event_specific_data.metadata["credit_holds_released"].value == 2
    assert billing.billing.summary(workspace_id).held_micros == 3000


def test_the_maintenance_schedule_runs_daily_by_default():
    schedule = build_maintenance_schedule(retention_days=7)
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert schedule.cron_schedule == "17 3 * * *" and schedule.job is maintenance
    assert "older than 7 days" in schedule.description


def test_finished_notification_deliveries_are_pruned_and_pending_ones_kept(sessions, trigger):
    workspace_id, _ = trigger
    with transaction(sessions) as session:
        endpoint = NotificationEndpoint(
            workspace_id=workspace_id, url="https://hooks.example.com/", event_types=["run.failed"], signing_secrets=[]
        )
        session.add(endpoint)
        session.flush()
        for status, days in [("succeeded", 31), ("failed", 40), ("pending", 60), ("succeeded", 29)]:
            delivery = NotificationDelivery(
                workspace_id=workspace_id,
                endpoint_id=endpoint.id,
                event_type="run.failed",
                message_id=f"msg_{uuid.uuid4().hex}",
                dedupe_key=f"{status}-{days}",
                payload=b"{}",
                status=status,
                created_at=NOW - timedelta(days=days),
            )
            session.add(delivery)
            session.flush()
            session.add(NotificationAttempt(delivery_id=delivery.id, attempted_at=NOW - timedelta(days=days)))
    assert prune_notification_deliveries(sessions, older_than=cutoff(NOW, 30)) >= 2
    with sessions() as session:
        left = session.scalars(
            sa.select(NotificationDelivery.dedupe_key).where(NotificationDelivery.endpoint_id == endpoint.id)
        )
        assert sorted(left) == ["pending-60", "succeeded-29"]
        kept = sa.select(NotificationDelivery.id).where(NotificationDelivery.endpoint_id == endpoint.id)
        attempts = sa.select(sa.func.count()).where(NotificationAttempt.delivery_id.in_(kept))
        assert session.scalar(attempts) == 2


def backdate(instance: dg.DagsterInstance, run_ids: list[str], days: float) -> None:
    """Make runs look `days` old in Dagster's run storage, as if they had been created then."""
    from dagster._core.storage.runs.schema import RunsTable

    then = (datetime.now(UTC) - timedelta(days=days)).replace(tzinfo=None)
    with instance.run_storage.connect() as conn:
        conn.execute(RunsTable.update().where(RunsTable.c.run_id.in_(run_ids)).values(create_timestamp=then))


def test_the_daily_maintenance_job_deletes_old_runs_but_each_pipelines_latest_crawl_and_every_charge(embedded):
    from pipelines_dagster import services
    from pipelines_dagster.crawl_metadata import latest_crawl
    from pipelines_dagster.history import RunHistory

    embedded.billing_enabled = True
    workspace_id, kept_on = embedded.pipeline(embedded.site(1), credit=10_000)
    other_workspace, switched_off = embedded.pipeline(embedded.site(1, prefix="/off"), credit=10_000)
    older, newer = (embedded.run(kept_on, workspace_id).run_id for _ in range(2))
    only = embedded.run(switched_off, other_workspace).run_id
    recent = embedded.run(kept_on, workspace_id).run_id
    # A disabled pipeline has no partition; its latest crawl is still what it builds on when enabled again.
    with transaction(embedded.sessions) as session:
        services.set_pipeline_enabled(
            session, embedded.instance, workspace_id=other_workspace, pipeline_id=switched_off, enabled=False
        )
    backdate(embedded.instance, [older, newer, only], days=40)
    charges = embedded.charges(workspace_id), embedded.charges(other_workspace)
    assert (charges[0][0], charges[1][0]) == (3, 1)

    result = maintenance.execute_in_process(
        instance=embedded.instance,
        resources={key: embedded.resources()[key] for key in ("app_db", "blob_store", "billing")},
        run_config=dg.RunConfig(ops={"apply_retention_op": RetentionConfig(retention_days=30)}),
    )
    assert result.success
    [output] = [event for event in result.all_events if event.is_successful_output]
    # `newer` is old but no longer its pipeline's latest (`recent` is): it goes; `only` holds its pipeline's.
    assert (
        output.event_specific_data.metadata["runs_deleted"].value,
        output.event_specific_data.metadata["runs_kept"].value,
    ) == (2, 1)
    present = {run_id: embedded.instance.get_run_by_id(run_id) is not None for run_id in (older, newer, only, recent)}
    assert present == {older: False, newer: False, only: True, recent: True}
    assert not embedded.instance.all_logs(older)
    stored = latest_crawl(embedded.instance, embedded.key(switched_off))
    assert stored is not None and stored.run_id == only
    # The ledger keeps every charge; run history answers with the runs that are left.
    assert (embedded.charges(workspace_id), embedded.charges(other_workspace)) == charges
    history = RunHistory(embedded.instance, embedded.sessions)
    assert [run.run_id for run in history.list_runs(workspace_id).runs] == [recent]
    assert history.get_run(workspace_id, older) is None
