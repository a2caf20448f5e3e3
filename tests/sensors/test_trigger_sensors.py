"""Sensors on a real Dagster instance: scheduled run requests, partition sync, lock release."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from dagster._core.definitions.instigation_logger import get_instigation_log_records
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.storage.locks import DatabaseLocks, connector_lock_name, pipeline_lock_name
from pipelines_dagster.partitions import add_pipeline_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.locks import DatabaseLocksResource
from pipelines_dagster.runs import (
    PIPELINE_BATCH_OP,
    batch_pipeline_ids,
    batch_tags,
    member_workspace_tag,
    pipeline_id_of_partition,
    run_tags,
)
from pipelines_dagster.sensors import run_status
from pipelines_dagster.sensors.common import busy_pipelines
from pipelines_dagster.sensors.events import build_event_sensor
from pipelines_dagster.sensors.partitions import pipeline_partitions_sync
from pipelines_dagster.sensors.run_status import lock_release_sensors, release_run_locks
from pipelines_dagster.sensors.schedules import build_schedule_sensor
from pipelines_dagster.sensors.webhooks import build_webhook_sensor
from pipelines_dagster.settings import Settings
from tests.support.webhooks import Webhook, create_webhook, deliver


@pytest.fixture
def instance():
    with dg.instance_for_test() as test_instance:
        yield test_instance


@pytest.fixture
def app_db(app_engine) -> AppDatabaseResource:
    return AppDatabaseResource(url=app_engine.url.render_as_string(hide_password=False))


def make_pipeline(app_db: AppDatabaseResource, *, due: bool = True, enabled: bool = True) -> tuple[int, int, int]:
    """(workspace id, pipeline id, trigger id) of a pipeline with an every-minute cron."""
    with transaction(app_db.sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="u").workspace
        connector = create_connector(
            session, workspace_id=workspace.id, connector_type="webcrawler", urls=["https://example.com/"]
        )
        pipeline = create_pipeline(
            session,
            workspace_id=workspace.id,
            connector_id=connector.id,
            name=f"p-{uuid.uuid4().hex[:6]}",
            enabled=enabled,
            schedule=ScheduleSpec(cron="* * * * *", timezone="UTC"),
        )
        trigger = session.query(PipelineTrigger).filter_by(pipeline_id=pipeline.id, kind="schedule").one()
        if due:
            trigger.next_fire_at = datetime.now(UTC) - timedelta(seconds=30)
        return workspace.id, pipeline.id, trigger.id


def evaluate(
    sensor: dg.SensorDefinition,
    instance: dg.DagsterInstance,
    app_db,
    cursor: str | None = None,
    *,
    log_key: list[str] | None = None,
):
    """One tick as the daemon evaluates it: run requests resolved and checked against the sensor's jobs;
    with `log_key`, its log captured there, as the daemon captures a tick's."""
    from pipelines_dagster.definitions import defs

    with dg.SensorEvaluationContext(
        instance=instance,
        instance_ref=instance.get_ref(),
        cursor=cursor,
        log_key=log_key,
        sensor_name=sensor.name,
        repository_name=defs.get_repository_def().name,
        resources={"app_db": app_db},
        repository_def=defs.get_repository_def(),
    ) as context:
        return sensor.evaluate_tick(context)


def key_of(app_db, pipeline_id: int) -> str:
    with app_db.sessions() as session:
        return session.get_one(Pipeline, pipeline_id).partition


def requests_for(result: dg.SensorResult, pipeline_id: int) -> list[dg.RunRequest]:
    return [
        r for r in result.run_requests if r.partition_key and pipeline_id_of_partition(r.partition_key) == pipeline_id
    ]


def test_a_due_schedule_requests_a_scheduled_run_with_its_partition(instance, app_db):
    workspace_id, pipeline_id, trigger_id = make_pipeline(app_db)
    result = evaluate(build_schedule_sensor(Settings(run_batch_size=1)), instance, app_db)
    [request] = requests_for(result, pipeline_id)
    assert request.run_key.startswith(f"schedule:{trigger_id}:")
    assert request.tags["trigger"] == "scheduled"
    assert request.tags["pipeline_id"] == str(pipeline_id) and request.tags["workspace_id"] == str(workspace_id)
    assert request.tags["pipeline_name"].startswith("p-")
    assert request.run_key.endswith(request.tags["scheduled_for"])
    added = [key for r in result.dynamic_partitions_requests for key in r.partition_keys]
    # Its partition key, which carries its name.
    assert request.partition_key == key_of(app_db, pipeline_id) == f"{pipeline_id}-{request.tags['pipeline_name']}"
    assert request.partition_key in added
    # Advanced: the next tick has nothing for it.
    assert (
        requests_for(evaluate(build_schedule_sensor(Settings(run_batch_size=1)), instance, app_db), pipeline_id) == []
    )


def test_a_disabled_pipeline_gets_no_run_but_its_trigger_advances(instance, app_db):
    _, pipeline_id, trigger_id = make_pipeline(app_db, enabled=False)
    sensor, log_key = build_schedule_sensor(Settings(run_batch_size=1)), ["test", "disabled-pipeline-tick"]
    assert requests_for(evaluate(sensor, instance, app_db, log_key=log_key), pipeline_id) == []
    with app_db.sessions() as session:
        assert session.get(PipelineTrigger, trigger_id).next_fire_at > datetime.now(UTC)
    # The pipeline, not the trigger, is the switch: the tick's log says its trigger fired into nothing.
    logged = [record["msg"] for record in get_instigation_log_records(instance, log_key)]
    assert any(
        f"pipelines [{pipeline_id}] are disabled: their triggers fired and started no run" in line for line in logged
    )


def test_a_pipeline_with_a_running_run_gets_no_second_one(instance, app_db):
    workspace_id, pipeline_id, _ = make_pipeline(app_db)
    instance.add_run(
        dg.DagsterRun(
            job_name="pipeline_run",
            run_id=str(uuid.uuid4()),
            status=dg.DagsterRunStatus.STARTED,
            tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
        )
    )
    assert (
        requests_for(evaluate(build_schedule_sensor(Settings(run_batch_size=1)), instance, app_db), pipeline_id) == []
    )


def requested_pipelines(request: dg.RunRequest) -> list[int]:
    if request.job_name == "pipeline_batch":
        return batch_pipeline_ids(request.tags)
    return [pipeline_id_of_partition(request.partition_key)]


def test_fires_due_together_run_in_batches_of_at_most_run_batch_size(instance, app_db):
    ours = [make_pipeline(app_db) for _ in range(5)]
    result = evaluate(build_schedule_sensor(Settings(run_batch_size=2)), instance, app_db)
    # Other tests' every-minute pipelines on the shared database may be due too: look at ours.
    covering = {
        pipeline_id: [r for r in result.run_requests if pipeline_id in requested_pipelines(r)]
        for _, pipeline_id, _ in ours
    }
    assert all(len(requests) == 1 for requests in covering.values()), covering
    batches = [r for r in result.run_requests if r.job_name == "pipeline_batch"]
    assert batches and all(len(requested_pipelines(r)) <= 2 for r in result.run_requests)
    for request in batches:
        config = request.run_config["ops"][PIPELINE_BATCH_OP]["config"]["pipelines"]
        assert (
            [member["pipeline_id"] for member in config]
            == requested_pipelines(request)
            == sorted(member["pipeline_id"] for member in config)
        )
        assert all(member["scheduled_for"] for member in config)
        # Each member runs under its own partition key, which its config names.
        assert all(member["partition_key"] == key_of(app_db, member["pipeline_id"]) for member in config)
        assert request.tags["trigger"] == "scheduled" and request.run_key.startswith("schedule-batch:")
        assert request.partition_key is None
        # The run list's summary names the members: "12 (p-3f2a1c), 13 (p-...)".
        first = requested_pipelines(request)[0]
        assert request.tags["pipelines"].startswith(f"{first} (p-")
    for workspace_id, pipeline_id, _ in ours:
        [request] = covering[pipeline_id]
        assert request.tags.get(member_workspace_tag(workspace_id)) == "member" or (
            request.tags["workspace_id"] == str(workspace_id)
        )
    added = {key for r in result.dynamic_partitions_requests for key in r.partition_keys}
    assert {key_of(app_db, pipeline_id) for _, pipeline_id, _ in ours} <= added


def test_a_pipeline_in_a_running_batch_run_gets_no_second_scheduled_run(instance, app_db):
    workspace_id, pipeline_id, _ = make_pipeline(app_db)
    instance.add_run(
        dg.DagsterRun(
            job_name="pipeline_batch",
            run_id=str(uuid.uuid4()),
            status=dg.DagsterRunStatus.STARTED,
            tags=batch_tags([(pipeline_id, workspace_id)], trigger="scheduled"),
        )
    )
    result = evaluate(build_schedule_sensor(Settings(run_batch_size=20)), instance, app_db)
    assert not [r for r in result.run_requests if pipeline_id in requested_pipelines(r)]


# What the Dagster UI launches: the asset job, with only the partition tag (and the backfill's, for a backfill).
ASSET_JOB = "__ASSET_JOB"
ORIGIN = RemoteJobOrigin(
    repository_origin=RemoteRepositoryOrigin(
        code_location_origin=RegisteredCodeLocationOrigin("pipelines_dagster"), repository_name="__repository__"
    ),
    job_name=ASSET_JOB,
)


def ui_launch(
    instance: dg.DagsterInstance,
    partition: str,
    status: dg.DagsterRunStatus,
    *,
    origin: RemoteJobOrigin | None = None,
    **tags: str,
) -> dg.DagsterRun:
    return instance.add_run(
        dg.DagsterRun(
            job_name=ASSET_JOB,
            run_id=str(uuid.uuid4()),
            status=status,
            asset_selection=frozenset({dg.AssetKey("crawl_results")}),
            tags={"dagster/partition": partition, **tags},
            remote_job_origin=origin,
        )
    )


@pytest.mark.parametrize("tags", [{}, {"dagster/backfill": "abcdefgh"}], ids=["asset page", "backfill"])
@pytest.mark.parametrize("status", [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTED])
def test_a_pipeline_with_a_queued_or_running_ui_launch_gets_no_scheduled_run(instance, app_db, status, tags):
    _, pipeline_id, _ = make_pipeline(app_db)
    ui_launch(instance, key_of(app_db, pipeline_id), status, origin=ORIGIN, **tags)
    instance.add_run(
        dg.DagsterRun(
            job_name="maintenance",
            run_id=str(uuid.uuid4()),
            status=status,
            remote_job_origin=ORIGIN._replace(job_name="maintenance"),
        )
    )
    assert pipeline_id in busy_pipelines(instance)
    assert (
        requests_for(evaluate(build_schedule_sensor(Settings(run_batch_size=1)), instance, app_db), pipeline_id) == []
    )


def failure_lock_release_ticks(instance, app_db, billing: BillingResource) -> Callable[[str | None], str | None]:
    """One tick of the sensor that frees what failed runs left, from a cursor; it returns the next cursor."""
    [sensor] = [sensor for sensor in lock_release_sensors if sensor.name == "release_locks_of_failure_runs"]
    resources = {"locks": DatabaseLocksResource(database_url=app_db.url), "app_db": app_db, "billing": billing}

    def tick(cursor: str | None) -> str | None:
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
            return sensor.evaluate_tick(context).cursor

    return tick


def fail_runs_holding_credit(instance, app_db, billing: BillingResource, count: int) -> int:
    """`count` UI launches of a new pipeline, each holding 1000 micro-credits, then failed; their workspace."""
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    runs = [ui_launch(instance, key_of(app_db, pipeline_id), dg.DagsterRunStatus.STARTED) for _ in range(count)]
    billing.billing.grant(workspace_id, 1000 * count)
    for run in runs:
        billing.reserve(workspace_id, 1, idempotency_key=f"{run.run_id}:{pipeline_id}", run_id=run.run_id)
    assert billing.billing.summary(workspace_id).available_micros == 0
    for run in runs:
        instance.report_run_failed(run)
    return workspace_id


def test_the_lock_release_sensor_frees_what_a_failed_asset_job_run_left(instance, app_db, app_engine):
    billing = BillingResource(app_db=app_db, billing_enabled=True)
    tick = failure_lock_release_ticks(instance, app_db, billing)
    cursor = tick(None)  # a run-status sensor's first tick only sets its cursor
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    run = ui_launch(instance, key_of(app_db, pipeline_id), dg.DagsterRunStatus.STARTED)
    locks = DatabaseLocks(app_engine)
    locks.acquire(pipeline_lock_name(pipeline_id), run.run_id, ttl_seconds=600)
    billing.billing.grant(workspace_id, 5000)
    billing.reserve(workspace_id, 5, idempotency_key=f"{run.run_id}:{pipeline_id}", run_id=run.run_id)
    assert billing.billing.summary(workspace_id).available_micros == 0
    instance.report_run_failed(run)
    tick(cursor)
    assert not locks.is_locked(pipeline_lock_name(pipeline_id))
    assert billing.billing.summary(workspace_id).available_micros == 5000


def test_one_lock_release_tick_frees_the_holds_of_thirty_runs_that_failed_since_the_last(instance, app_db):
    """Dagster's run-status sensors handle 5 runs a tick by default; the code location lets them take 100, so
    ending runs at a busy deployment's rate does not leave locks and holds waiting behind a queue of ticks."""
    import pipelines_dagster.definitions  # noqa: F401  (loading the code location sets the limit, as in the daemon)

    billing = BillingResource(app_db=app_db, billing_enabled=True)
    tick = failure_lock_release_ticks(instance, app_db, billing)
    cursor = tick(None)
    workspace_id = fail_runs_holding_credit(instance, app_db, billing, 30)
    tick(cursor)
    assert billing.billing.summary(workspace_id).available_micros == 30_000


def test_a_lock_release_tick_out_of_time_leaves_the_runs_after_it_to_the_next_tick(
    instance, app_db, monkeypatch: pytest.MonkeyPatch
):
    billing = BillingResource(app_db=app_db, billing_enabled=True)
    tick = failure_lock_release_ticks(instance, app_db, billing)
    cursor = tick(None)
    workspace_id = fail_runs_holding_credit(instance, app_db, billing, 3)
    monkeypatch.setattr(run_status, "TICK_SECONDS", 0.0)  # each tick is out of time once it handled a run
    freed = []
    for _ in range(4):
        cursor = tick(cursor)
        freed.append(billing.billing.summary(workspace_id).available_micros)
    assert freed == [1000, 2000, 3000, 3000]  # one run a tick, none left behind


def test_partition_sync_adds_new_pipelines_and_removes_deleted_ones_in_one_tick(instance, app_db):
    _, pipeline_id, _ = make_pipeline(app_db, due=False)
    add_pipeline_partitions(instance, ["987654"])
    result = evaluate(pipeline_partitions_sync, instance, app_db)
    changed = {type(request): set(request.partition_keys) for request in result.dynamic_partitions_requests}
    assert key_of(app_db, pipeline_id) in changed[dg.AddDynamicPartitionsRequest]
    assert changed[dg.DeleteDynamicPartitionsRequest] == {"987654"}


def test_a_failed_runs_locks_are_released_and_no_one_elses(instance, app_db, app_engine):
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    with app_db.sessions() as session:
        connector_id = session.get(Pipeline, pipeline_id).connector_id
    locks = DatabaseLocks(app_engine)
    run = dg.DagsterRun(
        job_name="pipeline_run",
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.FAILURE,
        tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="scheduled"),
    )
    locks.acquire(pipeline_lock_name(pipeline_id), run.run_id, ttl_seconds=600)
    locks.acquire(connector_lock_name(connector_id), "some-other-run", ttl_seconds=600)
    resource = DatabaseLocksResource(database_url=app_db.url)
    released = release_run_locks(run, locks=resource, app_db=app_db)
    assert released == [pipeline_lock_name(pipeline_id)]
    assert not locks.is_locked(pipeline_lock_name(pipeline_id))
    assert locks.owner_of(connector_lock_name(connector_id)) == "some-other-run"


def test_a_failed_batch_runs_locks_are_released_for_every_member(instance, app_db, app_engine):
    members = [make_pipeline(app_db, due=False)[:2] for _ in range(2)]
    with app_db.sessions() as session:
        connectors = [session.get(Pipeline, pipeline_id).connector_id for _, pipeline_id in members]
    locks = DatabaseLocks(app_engine)
    run = dg.DagsterRun(
        job_name="pipeline_batch",
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.FAILURE,
        tags=batch_tags([(pipeline_id, workspace_id) for workspace_id, pipeline_id in members], trigger="scheduled"),
    )
    # The run died in the second pipeline's crawl; the first's were released when its crawl ended.
    locks.acquire(pipeline_lock_name(members[1][1]), run.run_id, ttl_seconds=600)
    locks.acquire(connector_lock_name(connectors[1]), run.run_id, ttl_seconds=600)
    locks.acquire(pipeline_lock_name(members[0][1]), "a-later-run", ttl_seconds=600)
    resource = DatabaseLocksResource(database_url=app_db.url)
    released = release_run_locks(run, locks=resource, app_db=app_db)
    assert released == [pipeline_lock_name(members[1][1]), connector_lock_name(connectors[1])]
    assert locks.owner_of(pipeline_lock_name(members[0][1])) == "a-later-run"


def test_lock_release_sensors_watch_failed_and_canceled_pipeline_runs():
    assert sorted(sensor.name for sensor in lock_release_sensors) == [
        "release_locks_of_canceled_runs",
        "release_locks_of_failure_runs",
    ]
    assert all(sensor.default_status == dg.DefaultSensorStatus.RUNNING for sensor in lock_release_sensors)


def webhook_for(app_db, pipeline_id: int, workspace_id: int) -> Webhook:
    with transaction(app_db.sessions) as session:
        return create_webhook(session, workspace_id=workspace_id, pipeline_id=pipeline_id)


def send(app_db, hook: Webhook, body: bytes, delivery: str) -> int:
    with transaction(app_db.sessions) as session:
        return deliver(session, hook, body, delivery)


def test_each_webhook_delivery_becomes_one_run_request(instance, app_db):
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    hook = webhook_for(app_db, pipeline_id, workspace_id)
    first = send(app_db, hook, b'{"a": 1}', "d1")
    send(app_db, hook, b'{"a": 1}', "d1")  # a redelivery: stored once
    second = send(app_db, hook, b'{"a": 2}', "d2")
    result = evaluate(build_webhook_sensor(Settings()), instance, app_db)
    mine = requests_for(result, pipeline_id)
    assert [r.run_key for r in mine] == [f"webhook:{first}", f"webhook:{second}"]
    assert {r.tags["trigger"] for r in mine} == {"webhook"}
    assert mine[0].tags["webhook_delivery_id"] == str(first)
    assert requests_for(evaluate(build_webhook_sensor(Settings()), instance, app_db), pipeline_id) == []


def test_a_tick_takes_at_most_the_deliveries_settings_allow_and_the_next_tick_the_rest(instance, app_db):
    sensor = build_webhook_sensor(Settings(trigger_batch_size=1, trigger_max_per_tick=2))
    evaluate(sensor, instance, app_db)  # what other tests left pending on a shared database
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    hook = webhook_for(app_db, pipeline_id, workspace_id)
    sent = [send(app_db, hook, b"%d" % n, f"cap-{n}") for n in range(3)]
    first = [r.run_key for r in requests_for(evaluate(sensor, instance, app_db), pipeline_id)]
    rest = [r.run_key for r in requests_for(evaluate(sensor, instance, app_db), pipeline_id)]
    assert (first, rest) == ([f"webhook:{sent[0]}", f"webhook:{sent[1]}"], [f"webhook:{sent[2]}"])


def test_a_webhook_for_a_disabled_pipeline_starts_nothing(instance, app_db):
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    hook = webhook_for(app_db, pipeline_id, workspace_id)
    with transaction(app_db.sessions) as session:
        session.get(Pipeline, pipeline_id).enabled = False
    send(app_db, hook, b"{}", "d-off")
    assert requests_for(evaluate(build_webhook_sensor(Settings()), instance, app_db), pipeline_id) == []


def test_events_start_the_subscribed_pipelines_they_concern(instance, app_db):
    from pipelines_dagster.core.catalog.triggers import create_event_trigger
    from pipelines_dagster.core.triggers.events import emit_event

    workspace_id, subscribed, _ = make_pipeline(app_db, due=False)
    with transaction(app_db.sessions) as session:
        connector_id = session.get(Pipeline, subscribed).connector_id
        other = create_pipeline(session, workspace_id=workspace_id, connector_id=None, name="unsubscribed").id
        trigger = create_event_trigger(
            session, workspace_id=workspace_id, pipeline_id=subscribed, event_type="connector.urls_changed"
        )
        trigger_id = trigger.id
        hit = emit_event(
            session,
            workspace_id=workspace_id,
            event_type="connector.urls_changed",
            payload={"connector_id": connector_id},
        ).id
        emit_event(
            session,
            workspace_id=workspace_id,
            event_type="connector.urls_changed",
            payload={"connector_id": connector_id + 1000},
        )
        emit_event(session, workspace_id=workspace_id, event_type="folder.changed")
    result = evaluate(build_event_sensor(Settings()), instance, app_db)
    [request] = requests_for(result, subscribed)
    assert request.run_key == f"event:{hit}:{trigger_id}"
    assert (request.tags["trigger"], request.tags["event_type"]) == ("event", "connector.urls_changed")
    assert requests_for(result, other) == []
    assert requests_for(evaluate(build_event_sensor(Settings()), instance, app_db), subscribed) == []
