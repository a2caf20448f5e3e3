"""Locks that hold: a crawl that loses its pipeline lock stops within seconds and charges nothing, and a
run's retry after an outage of the locks' database takes back the lease its failed attempt left."""

from __future__ import annotations

import threading
import time
import uuid

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.models import CreditHold
from pipelines_dagster.core.run.leases import LOCK_RENEW_SECONDS
from pipelines_dagster.core.storage.locks import pipeline_lock_name
from pipelines_dagster.resources.blob_store import LocalBlobStoreResource
from pipelines_dagster.resources.locks import DatabaseLocksResource, RedisLocksResource
from tests.assets.conftest import Stack, failure_message, set_pipeline
from tests.support import ledger
from tests.support.redis_server import own_redis  # noqa: F401  (fixture)
from tests.support.tcp_proxy import TcpProxy
from tests.support.web import WebServer, page

PAGES = 60
# At four requests per host at a time a whole crawl lasts 15 s: the lock is lost a second in.
PAGE_DELAY_SECONDS = 1.0
# The loss is noticed at the next renewal; requests in flight then are dropped.
NOTICED_WITHIN_SECONDS = LOCK_RENEW_SECONDS + 2


def slow_site(stack: Stack, pages: int = PAGES) -> list[str]:
    for n in range(pages):
        stack.web.route(f"/s{n}", page(f"Slow {n}", f"Page {n}.", delay=PAGE_DELAY_SECONDS))
    return [stack.web.url(f"/s{n}") for n in range(pages)]


def run_in_background(stack: Stack, pipeline_id: int, workspace_id: int) -> tuple[threading.Thread, list]:
    result: list[dg.ExecuteInProcessResult] = []
    runner = threading.Thread(target=lambda: result.append(stack.run(pipeline_id, workspace_id)))
    runner.start()
    deadline = time.monotonic() + 30
    while not stack.web.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.web.requests, "the crawl never started"
    return runner, result


def open_holds(stack: Stack, workspace_id: int) -> list[int]:
    return ledger.holds(stack.sessions, workspace_id, CreditHold.micros, status="open")


def assert_stopped_and_charged_nothing(
    stack: Stack, workspace_id: int, result: dg.ExecuteInProcessResult, lost_at: float
) -> None:
    assert not result.success
    assert "lost its lock" in failure_message(result) and "charged nothing" in failure_message(result)
    late = [request for request in stack.web.requests if request.received_at > lost_at + NOTICED_WITHIN_SECONDS]
    assert late == [], f"{len(late)} requests sent after the loss was noticed"
    assert len(stack.web.requests) < PAGES
    assert stack.charges(workspace_id) == (0, 0)


@pytest.mark.parametrize("backend", ["database", "redis"])
def test_a_crawl_whose_lock_is_deleted_stops_within_seconds_and_charges_nothing(stack: Stack, backend, redis_url):
    if backend == "redis":
        stack.locks = RedisLocksResource(url=redis_url, key_prefix=f"test:{uuid.uuid4().hex[:8]}:")
    else:
        stack.locks = DatabaseLocksResource(database_url=stack.url)
    stack.billing_enabled = True
    workspace_id, pipeline_id = stack.pipeline(slow_site(stack), credit=1_000_000)
    set_pipeline(stack, pipeline_id, retry_max=0)
    runner, result = run_in_background(stack, pipeline_id, workspace_id)
    name = pipeline_lock_name(pipeline_id)
    assert stack.locks.release(name, stack.locks.owner_of(name))
    lost_at = time.monotonic()
    runner.join()
    assert_stopped_and_charged_nothing(stack, workspace_id, result[0], lost_at)
    # The failed run's hold is left to its run's end (the run-status sensor); it is this run's own.
    assert open_holds(stack, workspace_id) == [PAGES * 1000]


def test_a_crawl_whose_redis_restarts_empty_stops_within_seconds_and_charges_nothing(production: Stack, own_redis):
    production.locks = RedisLocksResource(url=own_redis.url)
    production.billing_enabled = True
    workspace_id, pipeline_id = production.pipeline(slow_site(production), credit=1_000_000)
    set_pipeline(production, pipeline_id, retry_max=0)
    runner, result = run_in_background(production, pipeline_id, workspace_id)
    own_redis.stop()
    own_redis.start()
    lost_at = time.monotonic()
    runner.join()
    assert_stopped_and_charged_nothing(production, workspace_id, result[0], lost_at)


def test_a_retry_after_a_20_s_app_database_outage_retakes_its_own_lease_and_charges_once(postgres_url, tmp_path):
    target = sa.make_url(postgres_url)
    with (
        TcpProxy((target.host or "127.0.0.1", target.port or 5432)) as proxy,
        WebServer() as web,
        dg.instance_for_test() as instance,
    ):
        url = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        engine = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg2"), pool_pre_ping=True)
        stack = Stack(
            engine=engine,
            instance=instance,
            web=web,
            blob_store=LocalBlobStoreResource(root=str(tmp_path / "blobs")),
            locks=DatabaseLocksResource(database_url=url),
            billing_enabled=True,
        )
        workspace_id, pipeline_id = stack.pipeline(slow_site(stack, pages=20), credit=1_000_000)
        # Retries over 40 s, so the crawl outlives the outage.
        set_pipeline(stack, pipeline_id, retry_backoff="linear", retry_max=8, retry_delay_seconds=1)
        runner, result = run_in_background(stack, pipeline_id, workspace_id)
        proxy.cut()
        time.sleep(20)
        proxy.restore()
        runner.join()
        run = result[0]
        assert run.success, failure_message(run)
        retried = [event for event in run.all_events if event.event_type_value == "STEP_UP_FOR_RETRY"]
        assert retried, "the outage did not fail an attempt"
        assert stack.charges(workspace_id) == (1, 1)
        assert open_holds(stack, workspace_id) == []
        assert not stack.locks.is_locked(pipeline_lock_name(pipeline_id))
        engine.dispose()
