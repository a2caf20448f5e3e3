"""A trigger sensor tick killed between committing its marks and returning its run requests, on
PostgreSQL and a real Dagster instance: a later tick requests the fires it marked, and each runs once;
likewise a `dagster sensor preview`, a tick whose requests nobody launches.

The tick runs in a process of its own and is SIGKILLed once its takes have committed; the runs a
tick requests are created in the instance as the sensor daemon creates them (tagged with the run key
and the sensor, none for a run key the sensor already has a run for).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._serdes import serialize_value

from pipelines_dagster.app_db.engine import create_engine, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import DomainEvent, PipelineTrigger, WebhookDelivery
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.triggers import create_event_trigger
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.fires import GRACE
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.runs import pipeline_ids_of
from pipelines_dagster.sensors.common import RUN_KEY_TAG
from pipelines_dagster.sensors.events import build_event_sensor
from pipelines_dagster.sensors.schedules import build_schedule_sensor
from pipelines_dagster.sensors.webhooks import build_webhook_sensor
from pipelines_dagster.settings import Settings
from tests.conftest import database_beside
from tests.sensors.test_trigger_sensors import evaluate, instance, make_pipeline  # noqa: F401  (instance: fixture)
from tests.support.processes import kill_when_it_says
from tests.support.webhooks import create_webhook, deliver

pytestmark = pytest.mark.integration

REPO_DIR = Path(__file__).resolve().parents[2]
SENSOR_NAME_TAG = "dagster/sensor_name"
EVENT_TYPE = "refresh.requested"


@pytest.fixture
def app_db(postgres_url: str) -> Iterator[AppDatabaseResource]:
    """A database of the test's own: a lost fire is offered again oldest first, a batch at a time, and the
    deliveries other tests on this worker left (their runs in instances of their own) would look lost too."""
    with database_beside(postgres_url, "killed_tick") as url:
        engine = create_engine(url)
        upgrade(engine)
        engine.dispose()
        yield AppDatabaseResource(url=url)


def kill_a_tick_after_its_commit(kind: str, instance: dg.DagsterInstance, app_db: AppDatabaseResource, log: Path):
    env = os.environ | {"KILLED_TICK_INSTANCE_REF": serialize_value(instance.get_ref())}
    command = [sys.executable, "-m", "tests.sensors.killed_tick", kind, app_db.url]
    kill_when_it_says(command, b"committed\n", env=env, cwd=REPO_DIR, log=log)


def submit(instance: dg.DagsterInstance, sensor: dg.SensorDefinition, requests: list[dg.RunRequest]) -> None:
    """Create the requested runs as the sensor daemon does: one per run key and sensor."""
    for request in requests:
        tags = {RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor.name}
        if instance.get_runs(dg.RunsFilter(tags=tags)):
            continue
        instance.add_run(
            dg.DagsterRun(
                job_name=request.job_name,
                run_id=str(uuid.uuid4()),
                run_config=request.run_config,
                tags={**request.tags, **tags},
                status=dg.DagsterRunStatus.NOT_STARTED,
            )
        )


def ours(result: dg.SensorResult, pipeline_ids: set[int]) -> list[dg.RunRequest]:
    return [request for request in result.run_requests if set(pipeline_ids_of(request.tags)) & pipeline_ids]


def batch_members(config: dict) -> list[dict]:
    return config.get("ops", {}).get("run_pipelines", {}).get("config", {}).get("pipelines", [])


def fires_of(job_name: str, run_config: dict, tags: dict[str, str]) -> set[str]:
    """The fires a run (or a request for one) carries: its run key; for a scheduled fire, pipeline@scheduled_for,
    which is what a batch run of many says about each of its members."""
    if job_name == "pipeline_batch":
        return {f"{member['pipeline_id']}@{member['scheduled_for']}" for member in batch_members(run_config)}
    if "scheduled_for" in tags:
        return {f"{tags['pipeline_id']}@{tags['scheduled_for']}"}
    return {tags[RUN_KEY_TAG]} if RUN_KEY_TAG in tags else set()


def requested_fires(requests: list[dg.RunRequest], pipeline_ids: set[int]) -> set[str]:
    """The fires of these pipelines the requests carry (a batch may carry other tests' too)."""
    return {
        fire
        for request in requests
        for fire in fires_of(request.job_name, request.run_config, {**request.tags, RUN_KEY_TAG: request.run_key})
        if "@" not in fire or int(fire.split("@")[0]) in pipeline_ids
    }


def runs_per_fire(instance: dg.DagsterInstance, owed: set[str]) -> dict[str, int]:
    counts = dict.fromkeys(owed, 0)
    for run in instance.get_runs():
        for fire in fires_of(run.job_name, run.run_config, run.tags) & owed:
            counts[fire] += 1
    return counts


@dataclass
class Scenario:
    """A trigger sensor and rows it owes runs for: `owed` the fires (run keys; pipeline@scheduled_for for
    schedules, as a batch run says each member); `marks` where the killed tick's marks are, moved back
    by the grace period when time passes."""

    kind: str
    sensor: dg.SensorDefinition
    pipelines: set[int]
    owed: set[str]
    marks: tuple[type, str, set[int]]

    def time_passes(self, app_db: AppDatabaseResource) -> None:
        model, column, ids = self.marks
        with transaction(app_db.sessions) as session:
            moved = getattr(model, column) - sa.literal(GRACE + timedelta(seconds=1), sa.Interval())
            session.execute(sa.update(model).where(model.id.in_(ids)).values({column: moved}))


def webhook_rows(app_db: AppDatabaseResource) -> Scenario:
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    with transaction(app_db.sessions) as session:
        hook = create_webhook(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        ids = {deliver(session, hook, b'{"n": %d}' % n) for n in range(2)}
    owed = {f"webhook:{delivery_id}" for delivery_id in ids}
    return Scenario(
        "webhook", build_webhook_sensor(Settings()), {pipeline_id}, owed, (WebhookDelivery, "requested_at", ids)
    )


def event_rows(app_db: AppDatabaseResource) -> Scenario:
    with transaction(app_db.sessions) as session:
        workspace_id = create_workspace(session, name="events", owner_user_id="u").workspace.id
        pipelines = [
            create_pipeline(session, workspace_id=workspace_id, connector_id=None, name=f"p{n}").id for n in range(2)
        ]
        triggers = [
            create_event_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, event_type=EVENT_TYPE).id
            for pipeline_id in pipelines
        ]
        event_id = emit_event(session, workspace_id=workspace_id, event_type=EVENT_TYPE).id
    owed = {f"event:{event_id}:{trigger_id}" for trigger_id in triggers}
    return Scenario(
        "event", build_event_sensor(Settings()), set(pipelines), owed, (DomainEvent, "requested_at", {event_id})
    )


def schedule_rows(app_db: AppDatabaseResource) -> Scenario:
    made = [make_pipeline(app_db) for _ in range(2)]
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
    with transaction(app_db.sessions) as session:
        for _, _, trigger_id in made:
            trigger = session.get(PipelineTrigger, trigger_id)
            # Yearly, so it is not due again while the test runs: its lost fire is the one owed.
            trigger.cron, trigger.next_fire_at = "0 0 1 1 *", due
    pipelines = {pipeline_id for _, pipeline_id, _ in made}
    return Scenario(
        "schedule",
        build_schedule_sensor(Settings(run_batch_size=20)),
        pipelines,
        {f"{pipeline_id}@{due.isoformat()}" for pipeline_id in pipelines},
        (PipelineTrigger, "last_fired_at", {trigger_id for _, _, trigger_id in made}),
    )


@pytest.mark.parametrize("rows", [webhook_rows, event_rows, schedule_rows], ids=["webhook", "event", "schedule"])
def test_the_fires_of_a_tick_killed_after_its_commit_are_requested_again_and_each_runs_once(
    instance, app_db, rows, tmp_path
):
    scenario = rows(app_db)
    kill_a_tick_after_its_commit(scenario.kind, instance, app_db, tmp_path / "tick.log")
    offered_again_and_each_run_once(scenario, instance, app_db)


def test_a_preview_of_the_webhook_sensor_launches_nothing_and_its_deliveries_are_offered_again(instance, app_db):
    scenario = webhook_rows(app_db)
    # `dagster sensor preview pipeline_webhooks` evaluates a tick on the instance as the daemon does
    # (Dagster's get_external_sensor_execution) and prints its requests: it marks the deliveries taken
    # and launches nothing.
    previewed = ours(evaluate(scenario.sensor, instance, app_db), scenario.pipelines)
    assert requested_fires(previewed, scenario.pipelines) == scenario.owed
    offered_again_and_each_run_once(scenario, instance, app_db)


def offered_again_and_each_run_once(scenario: Scenario, instance: dg.DagsterInstance, app_db) -> None:
    """The fires a tick marked and never requested runs for are offered again once the grace period is
    over, and then each runs once."""
    sensor, pipelines = scenario.sensor, scenario.pipelines
    # The lost tick marked them: a tick within the grace period requests nothing of ours.
    assert ours(evaluate(sensor, instance, app_db), pipelines) == []
    assert runs_per_fire(instance, scenario.owed) == dict.fromkeys(scenario.owed, 0)

    scenario.time_passes(app_db)
    again = ours(evaluate(sensor, instance, app_db), pipelines)
    assert requested_fires(again, pipelines) == scenario.owed
    submit(instance, sensor, again)

    # Their runs exist now: nothing is requested again, however long after.
    for _ in range(2):
        scenario.time_passes(app_db)
        assert ours(evaluate(sensor, instance, app_db), pipelines) == []
    assert runs_per_fire(instance, scenario.owed) == dict.fromkeys(scenario.owed, 1)
