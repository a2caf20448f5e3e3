"""No lost or doubled webhook and event runs on PostgreSQL, whatever order rows commit in.

Ids are taken at insert but rows commit in another order; the sensors must still
request every row once. The load test posts through the real API under uvicorn
while two evaluators tick the real sensors at the same time.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import DomainEvent, WebhookDelivery
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.triggers import create_event_trigger
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.runs import pipeline_id_of_partition
from pipelines_dagster.sensors.events import build_event_sensor
from pipelines_dagster.sensors.webhooks import build_webhook_sensor
from pipelines_dagster.settings import Settings
from tests.api.conftest import free_port
from tests.sensors.test_trigger_sensors import evaluate, instance, make_pipeline  # noqa: F401  (instance: fixture)
from tests.support.processes import start_server, stop_group
from tests.support.webhooks import create_webhook, deliver

pytestmark = pytest.mark.integration

REPO_DIR = Path(__file__).resolve().parents[2]
EVENT_TYPE = "refresh.requested"


@pytest.fixture
def app_db(postgres_url: str) -> AppDatabaseResource:
    return AppDatabaseResource(url=postgres_url)


def run_keys(result: dg.SensorResult, pipeline_ids: set[int]) -> list[str]:
    return [r.run_key for r in result.run_requests if pipeline_id_of_partition(r.partition_key) in pipeline_ids]


Store = Callable[[Session], str]
"""Stores one row in the session's transaction: the run key it owes."""


def webhook_rows(app_db: AppDatabaseResource, workspace_id: int, pipeline_id: int) -> tuple[dg.SensorDefinition, Store]:
    with transaction(app_db.sessions) as session:
        hook = create_webhook(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    bodies = itertools.count()
    return build_webhook_sensor(Settings()), lambda session: f"webhook:{deliver(session, hook, b'%d' % next(bodies))}"


def event_rows(app_db: AppDatabaseResource, workspace_id: int, pipeline_id: int) -> tuple[dg.SensorDefinition, Store]:
    with transaction(app_db.sessions) as session:
        trigger_id = create_event_trigger(
            session, workspace_id=workspace_id, pipeline_id=pipeline_id, event_type=EVENT_TYPE
        ).id

    def store(session: Session) -> str:
        return f"event:{emit_event(session, workspace_id=workspace_id, event_type=EVENT_TYPE).id}:{trigger_id}"

    return build_event_sensor(Settings()), store


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


DELIVERIES = 2_000
EVENTS = 2_000
CLIENTS = 8
EVALUATORS = 2
SUBSCRIBERS = 3
# The API is CPU-bound here (FastAPI's per-request work): one worker per core keeps the test short.
API_WORKERS = min(os.cpu_count() or 1, 4)
# Between rounds of ticks, as the daemon pauses between evaluations (here far shorter than its 5 s).
TICK_PAUSE_SECONDS = 0.25


@pytest.fixture
def api_url(postgres_url: str, tmp_path: Path) -> Iterator[str]:
    """The real API under uvicorn on 127.0.0.1, a worker per CPU, over the PostgreSQL app database."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINES_", "DAGSTER_"))}
    env |= {
        "DAGSTER_HOME": str(tmp_path / "dagster-home"),
        "PIPELINES_DATA_DIR": str(tmp_path / "data"),
        "PIPELINES_DATABASE_URL": postgres_url,
    }
    url = f"http://127.0.0.1:{port}"
    command = [
        str(Path(sys.executable).with_name("uvicorn")),
        "--factory",
        "pipelines_dagster.api.app:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(API_WORKERS),
        "--no-access-log",
    ]
    server = start_server(command, env=env, cwd=REPO_DIR, log=tmp_path / "api.log", ready_url=f"{url}/openapi.json")
    yield url
    stop_group(server)


def test_concurrent_deliveries_and_events_each_request_exactly_one_run_per_pipeline(instance, app_db, api_url):
    with transaction(app_db.sessions) as session:
        made = create_workspace(session, name="load", owner_user_id="load")
        workspace_id = made.workspace.id
        hooked, *subscribed, disabled = (
            create_pipeline(session, workspace_id=workspace_id, connector_id=None, name=f"p{n}")
            for n in range(SUBSCRIBERS + 2)
        )
        hook = create_webhook(session, workspace_id=workspace_id, pipeline_id=hooked.id)
        triggers = [
            create_event_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline.id, event_type=EVENT_TYPE).id
            for pipeline in (*subscribed, disabled)
        ]
        disabled.enabled = False
        ours = {pipeline.id for pipeline in (hooked, *subscribed, disabled)}
    live_triggers = triggers[:SUBSCRIBERS]
    auth = {"Authorization": f"Bearer {made.api_token}"}

    posted = threading.Event()
    taken: list[list[str]] = [[] for _ in range(EVALUATORS)]
    aligned = threading.Barrier(EVALUATORS)

    def tick(slot: int) -> bool:
        aligned.wait()  # the evaluators tick at the same moment, so their takes contend for rows
        found = [
            key
            for sensor in (build_webhook_sensor(Settings()), build_event_sensor(Settings()))
            for key in run_keys(evaluate(sensor, instance, app_db), ours)
        ]
        taken[slot] += found
        return bool(found)

    def evaluate_until_all_taken() -> None:
        # A round that begins after the last post and finds nothing ends it: a row one
        # evaluator skipped as locked was taken by the other in that round.
        with ThreadPoolExecutor(EVALUATORS) as evaluators:
            while True:
                last = posted.is_set()
                if not any(list(evaluators.map(tick, range(EVALUATORS)))) and last:
                    return
                time.sleep(TICK_PAUSE_SECONDS)

    def client(first: int) -> list[str]:
        """One client's share of the posts, over one keep-alive connection: the run keys they owe."""
        owed = []
        with httpx.Client(base_url=api_url, timeout=30) as http:
            for n in range(first, DELIVERIES + EVENTS, CLIENTS):
                if n % 2:
                    body = b'{"n": %d}' % n
                    answer = http.post(hook.path, content=body, headers=hook.headers(body))
                    assert answer.status_code == 202, answer.text
                    owed.append(f"webhook:{answer.json()['delivery_id']}")
                else:
                    answer = http.post(
                        f"/workspaces/{workspace_id}/events", json={"event_type": EVENT_TYPE}, headers=auth
                    )
                    assert answer.status_code == 202, answer.text
                    owed += [f"event:{answer.json()['event_id']}:{trigger_id}" for trigger_id in live_triggers]
        return owed

    with ThreadPoolExecutor(1) as background:
        evaluating = background.submit(evaluate_until_all_taken)
        try:
            with ThreadPoolExecutor(CLIENTS) as clients:
                owed = [key for keys in clients.map(client, range(CLIENTS)) for key in keys]
        finally:
            posted.set()
        evaluating.result()

    expected = set(owed)
    assert len(owed) == len(expected) == DELIVERIES + EVENTS * SUBSCRIBERS
    every = [key for keys in taken for key in keys]
    assert len(every) == len(set(every)), "a row was requested twice"
    assert set(every) == expected
    assert all(taken), "each evaluator took some rows"
    with app_db.sessions() as session:
        for model in (WebhookDelivery, DomainEvent):
            pending = session.scalar(
                sa.select(sa.func.count())
                .select_from(model)
                .where(model.workspace_id == workspace_id, model.requested_at.is_(None))
            )
            assert pending == 0
