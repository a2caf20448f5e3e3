"""No lost or doubled webhook and event runs on PostgreSQL, whatever order rows commit in.

Ids are taken at insert but rows commit in another order; the sensors must still
request every row once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import dagster as dg
import pytest
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.triggers import create_event_trigger, emit_event
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.events import pipeline_events
from pipelines_dagster.sensors.webhooks import pipeline_webhooks
from tests.sensors.test_trigger_sensors import evaluate, instance, make_pipeline  # noqa: F401  (instance: fixture)
from tests.support.webhooks import create_webhook, deliver

pytestmark = pytest.mark.integration

EVENT_TYPE = "refresh.requested"


@pytest.fixture
def app_db(postgres_url: str) -> AppDatabaseResource:
    return AppDatabaseResource(url=postgres_url)


def run_keys(result: dg.SensorResult, pipeline_ids: set[int]) -> list[str]:
    return [r.run_key for r in result.run_requests if int(r.partition_key) in pipeline_ids]


Store = Callable[[Session], str]
"""Stores one row in the session's transaction: the run key it owes."""


def webhook_rows(app_db: AppDatabaseResource, workspace_id: int, pipeline_id: int) -> tuple[dg.SensorDefinition, Store]:
    with transaction(app_db.sessions) as session:
        hook = create_webhook(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    bodies = itertools.count()
    return pipeline_webhooks, lambda session: f"webhook:{deliver(session, hook, b'%d' % next(bodies))}"


def event_rows(app_db: AppDatabaseResource, workspace_id: int, pipeline_id: int) -> tuple[dg.SensorDefinition, Store]:
    with transaction(app_db.sessions) as session:
        trigger_id = create_event_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id,
                                          event_type=EVENT_TYPE).id

    def store(session: Session) -> str:
        return f"event:{emit_event(session, workspace_id=workspace_id, event_type=EVENT_TYPE).id}:{trigger_id}"

    return pipeline_events, store


def row_id(run_key: str) -> int:
    return int(run_key.split(":")[1])


@pytest.mark.parametrize("rows", [webhook_rows, event_rows], ids=["delivery", "event"])
def test_a_row_committed_after_a_higher_id_was_read_still_starts_a_run(instance, app_db, rows):
    workspace_id, pipeline_id, _ = make_pipeline(app_db, due=False)
    sensor, store = rows(app_db, workspace_id, pipeline_id)
    ours = {pipeline_id}
    with app_db.sessions() as late, late.begin():
        lower = store(late)
        with transaction(app_db.sessions) as session:
            higher = store(session)
        assert row_id(lower) < row_id(higher)
        first = evaluate(sensor, instance, app_db)
        assert run_keys(first, ours) == [higher]
    # The cursor goes back in as the daemon would pass it: it must not hide the lower id.
    second = evaluate(sensor, instance, app_db, cursor=first.cursor)
    assert run_keys(second, ours) == [lower]
    assert run_keys(evaluate(sensor, instance, app_db, cursor=second.cursor), ours) == []
