"""What queues notifications, through real runs: the run-status sensors after a run ends, the page-changes
materialization, and a charge that takes the balance under a threshold; each once, and only to the
endpoints that subscribed."""

from __future__ import annotations

import dagster as dg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import NotificationDelivery
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.endpoints import set_endpoint_enabled
from pipelines_dagster.notifications.events import credits_low_hook
from pipelines_dagster.notifications.sender import Sender, SendReport
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors import run_status
from pipelines_dagster.sensors.notifications import run_end_sensors
from tests.assets.conftest import API_URL, Stack, embedded, web  # noqa: F401  (fixtures)
from tests.notifications.conftest import HOOK, LOOPBACK, endpoint, posts, verified
from tests.support.web import WebServer, page

SENSORS = {sensor.name: sensor for sensor in run_end_sensors}


class RunEndSensors:
    """The run-status sensors ticking as the daemon ticks them, each with its own cursor."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.cursors: dict[str, str | None] = dict.fromkeys(SENSORS)
        self.tick()  # a run-status sensor's first tick only sets its cursor

    def tick(self) -> None:
        resources = {
            "app_db": AppDatabaseResource(url=self.stack.url),
            "notifications": self.stack.resources()["notifications"],
        }
        for name, sensor in SENSORS.items():
            with dg.build_sensor_context(
                instance=self.stack.instance, cursor=self.cursors[name], resources=resources
            ) as context:
                self.cursors[name] = sensor.evaluate_tick(context).cursor


def send_due(sessions: sessionmaker[Session]) -> SendReport:
    """A sender on the real clock, as the sensor runs it: what was queued just now is due."""
    return Sender(sessions, DestinationGuard(LOOPBACK)).send_due()


def deliveries(sessions: sessionmaker[Session], workspace_id: int) -> list[NotificationDelivery]:
    with sessions() as session:
        return list(
            session.scalars(
                sa.select(NotificationDelivery)
                .where(NotificationDelivery.workspace_id == workspace_id)
                .order_by(NotificationDelivery.id)
            )
        )


def test_a_succeeded_run_brings_one_run_succeeded_with_counts_duration_and_charge(embedded: Stack, receiver: WebServer):
    embedded.billing_enabled = True
    urls = embedded.site(2)
    workspace_id, pipeline_id = embedded.pipeline(urls, credit=10 * embedded.micros_per_crawl)
    with transaction(embedded.sessions) as session:
        other_pipeline = create_pipeline(session, workspace_id=workspace_id, connector_id=None, name="uploads").id
    created = endpoint(embedded.sessions, workspace_id, receiver.url(HOOK), events=["run.succeeded"])
    endpoint(embedded.sessions, workspace_id, receiver.url("/failures"), events=["run.failed"])
    endpoint(embedded.sessions, workspace_id, receiver.url("/narrow"), pipeline_ids=[other_pipeline])
    sensors = RunEndSensors(embedded)

    run = embedded.run(pipeline_id, workspace_id)
    assert run.success
    sensors.tick()
    sensors.tick()  # a later tick sees no new run end and queues nothing again
    [queued] = deliveries(embedded.sessions, workspace_id)
    assert (queued.endpoint_id, queued.event_type) == (created.endpoint.id, "run.succeeded")

    assert send_due(embedded.sessions).succeeded == 1
    [request] = posts(receiver)
    assert receiver.hits("/failures") == receiver.hits("/narrow") == 0
    message = verified(request, created.secret)
    data = message["data"]
    assert message["type"] == "run.succeeded"
    assert (data["workspace_id"], data["pipeline_id"], data["run_id"]) == (workspace_id, pipeline_id, run.run_id)
    assert (data["status"], data["trigger"], data["error"], data["will_retry"]) == ("succeeded", "manual", None, False)
    assert data["crawls"] == {"attempted": 2, "succeeded": 2, "empty": 0, "failed": 0}
    assert data["documents"] == {"created": 2, "updated": 0, "unchanged": 0}
    balance = Billing(embedded.sessions, enabled=True, micros_per_crawl=embedded.micros_per_crawl).balance(workspace_id)
    assert data["charged_micros"] == 2 * embedded.micros_per_crawl == 10 * embedded.micros_per_crawl - balance
    assert data["new_charge_micros"] == data["charged_micros"]  # this run made the charge
    stats = embedded.instance.get_run_stats(run.run_id)
    assert data["duration_seconds"] == pytest.approx(stats.end_time - stats.start_time, abs=0.01)
    assert data["duration_seconds"] > 0


def test_a_failed_run_says_why_to_the_endpoints_that_want_failures(embedded: Stack, receiver: WebServer):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1), enabled=False)
    created = endpoint(embedded.sessions, workspace_id, receiver.url(HOOK), events=["run.failed"])
    endpoint(embedded.sessions, workspace_id, receiver.url("/successes"), events=["run.succeeded"])
    sensors = RunEndSensors(embedded)
    assert not embedded.run(pipeline_id, workspace_id).success
    sensors.tick()
    send_due(embedded.sessions)
    [request] = posts(receiver)
    data = verified(request, created.secret)["data"]
    assert data["status"] == "failed" and data["crawls"]["attempted"] is None
    assert data["error"] == f"pipeline {pipeline_id} is disabled; enable it before running it"
    assert receiver.hits("/successes") == 0


def test_a_tick_out_of_time_leaves_the_runs_after_it_to_the_next_tick(
    embedded: Stack, receiver: WebServer, monkeypatch: pytest.MonkeyPatch
):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    endpoint(embedded.sessions, workspace_id, receiver.url(HOOK), events=["run.succeeded"])
    sensors = RunEndSensors(embedded)
    run_ids = [embedded.run(pipeline_id, workspace_id).run_id for _ in range(3)]
    monkeypatch.setattr(run_status, "TICK_SECONDS", 0.0)  # each tick is out of time once it handled a run

    queued = []
    for _ in range(4):
        sensors.tick()
        queued.append([delivery.dedupe_key for delivery in deliveries(embedded.sessions, workspace_id)])
    assert [len(keys) for keys in queued] == [1, 2, 3, 3]  # one run a tick, none lost, none twice
    assert queued[-1] == [f"run.succeeded:{run_id}:{pipeline_id}" for run_id in run_ids]


def test_page_changes_bring_one_pages_changed_per_crawl_with_links_to_the_diffs(embedded: Stack, receiver: WebServer):
    assets = [crawl_results, kb_documents, page_changes]
    urls = embedded.site(5)  # one 404 of 5 leaves the crawl healthy
    workspace_id, pipeline_id = embedded.pipeline(urls)
    created = endpoint(embedded.sessions, workspace_id, receiver.url(HOOK), events=["pages.changed"])
    embedded.run(pipeline_id, workspace_id, assets=assets)
    embedded.web.route("/p1", page("Page 1", "Rewritten."))
    embedded.web.route("/p2", page("Gone", "x", status=404))
    second = embedded.run(pipeline_id, workspace_id, assets=assets)
    # Recording the same crawl's changes again (a backfill of page_changes) queues nothing more.
    dg.materialize(
        [page_changes],
        partition_key=embedded.key(pipeline_id),
        instance=embedded.instance,
        resources=embedded.resources(),
        selection=[page_changes],
    )
    embedded.run(pipeline_id, workspace_id, assets=assets)  # nothing changed: nothing to tell
    assert len(deliveries(embedded.sessions, workspace_id)) == 2

    send_due(embedded.sessions)
    messages = [verified(request, created.secret) for request in posts(receiver)]
    first, changed = sorted(messages, key=lambda message: message["timestamp"])  # sent in any order
    assert (first["data"]["new"], first["data"]["changed"], first["data"]["removed"]) == (5, 0, 0)
    data = changed["data"]
    assert (data["run_id"], data["new"], data["changed"], data["removed"]) == (second.run_id, 0, 1, 1)
    changes_url = f"{API_URL}/workspaces/{workspace_id}/pipelines/{pipeline_id}/changes"
    assert data["changes_url"] == changes_url and data["truncated"] is False
    by_url = {change["url"]: change for change in data["changes"]}
    assert set(by_url) == {urls[1], urls[2]}
    assert by_url[urls[1]]["status"] == "changed"
    assert by_url[urls[1]]["diff_url"] == f"{changes_url}/{by_url[urls[1]]['change_id']}"
    assert (by_url[urls[2]]["status"], by_url[urls[2]]["diff_url"]) == ("removed", None)


def test_credits_low_fires_once_each_time_a_charge_takes_the_balance_under_the_threshold(sessions, workspace, receiver):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000, on_charged=credits_low_hook)
    created = endpoint(sessions, workspace, receiver.url(HOOK), events=["credits.low"], credits_below_micros=5_000)
    endpoint(sessions, workspace, receiver.url("/lower"), events=["credits.low"], credits_below_micros=1_000)
    billing.grant(workspace, 10_000)

    def charge(micros: int, key: str) -> None:
        billing.charge(workspace, micros, idempotency_key=key, usage={"pipeline_id": 7, "run_id": key})

    charge(3_000, "a")  # 7,000: above
    charge(3_000, "b")  # 4,000: crossed
    charge(3_000, "b")  # the same charge again: nothing
    charge(1_000, "c")  # 3,000: still under, no second message
    billing.grant(workspace, 10_000)  # 13,000
    charge(9_000, "d")  # 4,000: crossed again
    send_due(sessions)
    messages = [verified(request, created.secret) for request in posts(receiver)]
    assert sorted((message["data"] for message in messages), key=lambda data: data["run_id"]) == [
        {
            "workspace_id": workspace,
            "balance_micros": 4_000,
            "threshold_micros": 5_000,
            "charged_micros": charged,
            "pipeline_id": 7,
            "run_id": run_id,
        }
        for charged, run_id in ((3_000, "b"), (9_000, "d"))
    ]
    assert receiver.hits("/lower") == 0


def test_a_disabled_endpoint_is_queued_nothing(sessions, workspace, receiver):
    created = endpoint(sessions, workspace, receiver.url(HOOK), events=["credits.low"], credits_below_micros=5_000)
    with transaction(sessions) as session:
        set_endpoint_enabled(session, workspace_id=workspace, endpoint_id=created.endpoint.id, enabled=False)
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000, on_charged=credits_low_hook)
    billing.grant(workspace, 6_000)
    billing.charge(workspace, 2_000, idempotency_key="x", usage={})
    assert deliveries(sessions, workspace) == []
