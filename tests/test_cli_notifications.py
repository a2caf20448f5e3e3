"""The `notification` commands on each backend: endpoints and their secrets, test deliveries to a real
receiver on 127.0.0.1 verified as a Standard Webhooks receiver does, the delivery log, redrive, and
bad input refused naming the option, with nothing written."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from pipelines_dagster.api.schemas.common import DeletedOut
from pipelines_dagster.api.schemas.notifications import (
    EndpointOut,
    NewEndpointOut,
    NotificationDeliveryDetail,
    NotificationDeliveryOut,
    NotificationDeliveryPage,
    RedriveOut,
    RotatedEndpointOut,
)
from pipelines_dagster.app_db.engine import create_engine, session_factory, transaction
from pipelines_dagster.app_db.models import NotificationEndpoint
from pipelines_dagster.notifications.events import queue_run_ended
from pipelines_dagster.notifications.payloads import CrawlCounts, DocumentCounts, RunEventData
from pipelines_dagster.resources.deployment import build_resources
from pipelines_dagster.sensors.notifications import notification_sender
from pipelines_dagster.settings import load_settings
from tests.support.db import row_counts
from tests.support.web import Reply, Request, WebServer, confine_to_loopback
from tests.test_cli import api, as_model, connector, workspace  # noqa: F401  (fixtures)
from tests.test_cli import cli as sqlite_cli  # noqa: F401  (fixture)

HOOK = "/hook"
# A public address: an endpoint may point at it, and creating one sends nothing.
PUBLIC_URL = "https://93.184.215.14/hook"


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request, sqlite_cli, monkeypatch) -> Iterator[Any]:
    """The CLI as test_cli runs it, on SQLite or PostgreSQL, under the default network settings and
    confined to loopback: a guard that let something through fails its test instead of sending."""
    for name in ("PIPELINES_CRAWLER_ALLOWED_NETWORKS", "PIPELINES_CRAWLER_ALLOW_PRIVATE_NETWORKS"):
        monkeypatch.delenv(name, raising=False)
    confine_to_loopback(monkeypatch)
    if request.param == "sqlite":
        yield sqlite_cli
        return
    url = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("PIPELINES_DATABASE_URL", url)
    engine = create_engine(url)
    sqlite_cli.engine = lambda: engine
    with engine.connect() as conn:
        last_workspace = conn.scalar(sa.text("SELECT coalesce(max(id), 0) FROM workspaces"))
    yield sqlite_cli
    # The PostgreSQL database lives as long as the test session: what a test queued must not be sent later.
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM workspaces WHERE id > :last"), {"last": last_workspace})
    engine.dispose()


@pytest.fixture
def receiver(monkeypatch) -> Iterator[WebServer]:
    """A receiver on 127.0.0.1 answering 204 on /hook, with loopback allowed as a deployment allows it."""
    monkeypatch.setenv("PIPELINES_CRAWLER_ALLOWED_NETWORKS", "127.0.0.1/32")
    with WebServer() as server:
        server.route(HOOK, Reply(status=204, content_type=None))
        yield server


def create(cli, workspace_id: int, url: str, *extra: str) -> dict[str, Any]:
    return cli.json("notification", "create", "--workspace", str(workspace_id), "--url", url, *extra)


def posts(server: WebServer) -> list[Request]:
    return [request for request in server.requests if request.method == "POST" and request.path == HOOK]


def verified(request: Request, secret: str) -> dict[str, Any]:
    """The body of a received notification once its signature verifies, as any receiver checks it."""
    headers = {name: request.headers[name] for name in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    message: dict[str, Any] = Webhook(secret).verify(request.body, headers)
    return message


def deliveries(cli, workspace_id: int, endpoint_id: int, *extra: str) -> list[dict[str, Any]]:
    listed = cli.json(
        "notification", "deliveries", "--workspace", str(workspace_id), "--endpoint", str(endpoint_id), *extra
    )
    assert set(listed) == set(NotificationDeliveryPage.model_fields)
    return listed["deliveries"]


def sensor_tick() -> str | None:
    """One tick of the notification_sender sensor, on the resources the deployment builds from the environment."""
    resources = build_resources(load_settings())
    with dg.build_sensor_context(resources={"notifications": resources["notifications"]}) as context:
        return notification_sender(context).skip_message


def test_create_show_list_and_delete(cli, workspace, connector):
    ws = workspace["id"]
    made = cli.json("pipeline", "create", "--workspace", str(ws), "--connector", str(connector["id"]), "--name", "p")
    assert cli.json("notification", "list", "--workspace", str(ws)) == {"endpoints": []}
    created = create(
        cli,
        ws,
        PUBLIC_URL,
        *("--event-type", "run.failed", "--event-type", "credits.low", "--event-type", "run.failed"),
        *("--pipeline", str(made["id"]), "--credits-below-micros", "5000", "--description", "on-call"),
    )
    assert set(created) == set(NewEndpointOut.model_fields) and created["secret"].startswith("whsec_")
    assert (created["url"], created["event_types"], created["pipeline_ids"]) == (
        PUBLIC_URL,
        ["run.failed", "credits.low"],
        [made["id"]],
    )
    assert (created["credits_below_micros"], created["description"], created["enabled"]) == (5000, "on-call", True)

    shown = cli.json("notification", "show", "--workspace", str(ws), "--endpoint", str(created["id"]))
    assert set(shown) == set(EndpointOut.model_fields)
    assert shown == {key: value for key, value in created.items() if key != "secret"}
    assert cli.json("notification", "list", "--workspace", str(ws)) == {"endpoints": [shown]}
    line = cli("notification", "list", "--workspace", str(ws)).output
    assert line.startswith(f"{created['id']}\t{PUBLIC_URL}\tenabled\trun.failed, credits.low of pipelines {made['id']}")
    assert line.rstrip().endswith("credits below 5000 micros\ton-call")

    text = cli("notification", "create", "--workspace", str(ws), "--url", PUBLIC_URL, "--event-type", "run.succeeded")
    [second] = re.findall(r"notification endpoint (\d+) created", text.output)
    [secret] = [word for word in text.output.split() if word.startswith("whsec_")]
    assert "shown once" in text.output
    with cli.engine().connect() as conn:
        stored = conn.scalars(
            sa.select(NotificationEndpoint.signing_secrets)
            .where(NotificationEndpoint.workspace_id == ws)
            .order_by(NotificationEndpoint.id)
        )
        assert [entries[0]["secret"] for entries in stored] == [created["secret"], secret]

    assert cli.json("notification", "delete", "--workspace", str(ws), "--endpoint", str(created["id"])) == {
        "id": created["id"],
        "deleted": True,
    }
    gone = cli("notification", "show", "--workspace", str(ws), "--endpoint", str(created["id"]), ok=False)
    assert f"notification endpoint {created['id']} does not exist in workspace {ws}" in gone.output
    listed = cli.json("notification", "list", "--workspace", str(ws))["endpoints"]
    assert [endpoint["id"] for endpoint in listed] == [int(second)]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ["--url", PUBLIC_URL, "--event-type", "run.started"],
            "--event-type: unknown event type 'run.started'; use one of",
        ),
        (["--url", PUBLIC_URL], "--event-type: subscribe to at least one of"),
        (["--url", "ftp://example.com/hook", "--event-type", "run.failed"], "--url: malformed URL"),
        (["--url", "example.com/hook", "--event-type", "run.failed"], "http:// or https://"),
        (["--url", "http://127.0.0.1/", "--event-type", "run.failed"], "--url: blocked address 127.0.0.1"),
        (["--url", "http://10.1.2.3/hook", "--event-type", "run.failed"], "--url: blocked address 10.1.2.3"),
        (["--url", "http://169.254.169.254/latest", "--event-type", "run.failed"], "--url: blocked address"),
        (["--url", "http://[::1]:8080/", "--event-type", "run.failed"], "--url: blocked address"),
        (["--url", PUBLIC_URL, "--event-type", "credits.low"], "--credits-below-micros: credits.low needs the balance"),
        (
            ["--url", PUBLIC_URL, "--event-type", "credits.low", "--credits-below-micros", "0"],
            "--credits-below-micros: must be a whole",
        ),
        (
            ["--url", PUBLIC_URL, "--event-type", "credits.low", "--credits-below-micros", "-5"],
            "--credits-below-micros: must be a whole",
        ),
        (
            ["--url", PUBLIC_URL, "--event-type", "run.failed", "--credits-below-micros", "100"],
            "--credits-below-micros: is only for an endpoint subscribed to credits.low",
        ),
        (["--url", PUBLIC_URL, "--event-type", "run.failed", "--description", " "], "--description: must not be empty"),
        (["--url", PUBLIC_URL, "--event-type", "run.failed", "--pipeline", "424242"], "--pipeline: no pipeline 424242"),
        (
            ["--workspace", "999999", "--url", PUBLIC_URL, "--event-type", "run.failed"],
            "workspace 999999 does not exist",
        ),
    ],
)
def test_create_bad_input_names_the_option_and_writes_nothing(cli, workspace, args, reason):
    if "--workspace" not in args:
        args = ["--workspace", str(workspace["id"]), *args]
    before = row_counts(cli.engine())
    result = cli("notification", "create", *args, ok=False)
    assert reason in result.output
    assert row_counts(cli.engine()) == before


def test_a_private_address_is_allowed_by_the_crawlers_setting_only(cli, workspace, monkeypatch):
    def refused(url: str) -> str:
        args = ["--workspace", str(workspace["id"]), "--url", url, "--event-type", "run.failed"]
        return cli("notification", "create", *args, ok=False).output

    assert "PIPELINES_CRAWLER_ALLOWED_NETWORKS" in refused("http://127.0.0.1:9/")
    monkeypatch.setenv("PIPELINES_CRAWLER_ALLOWED_NETWORKS", "127.0.0.1/32")
    assert (
        create(cli, workspace["id"], "http://127.0.0.1:9/", "--event-type", "run.failed")["url"]
        == "http://127.0.0.1:9/"
    )
    assert "--url: blocked address 127.0.0.2" in refused("http://127.0.0.2/")


def test_create_refuses_another_workspaces_pipeline(cli, workspace, connector):
    made = cli.json(
        "pipeline", "create", "--workspace", str(workspace["id"]), "--connector", str(connector["id"]), "--name", "p"
    )
    other = cli.json("workspace", "create", "--name", "Other", "--owner", "user-2")
    before = row_counts(cli.engine())
    result = cli(
        *("notification", "create", "--workspace", str(other["id"]), "--url", PUBLIC_URL, "--event-type", "run.failed"),
        *("--pipeline", str(made["id"])),
        ok=False,
    )
    assert f"--pipeline: no pipeline {made['id']} in workspace {other['id']}" in result.output
    assert row_counts(cli.engine()) == before


def test_the_test_delivery_verifies_with_the_printed_secret(cli, workspace, receiver):
    ws = workspace["id"]
    created = create(cli, ws, receiver.url(HOOK), "--event-type", "run.succeeded")
    sent = cli.json("notification", "test", "--workspace", str(ws), "--endpoint", str(created["id"]))
    assert set(sent) == set(NotificationDeliveryDetail.model_fields)
    [attempt] = sent["attempt_log"]
    assert (attempt["status_code"], attempt["succeeded"]) == (204, True)
    assert (sent["event_type"], sent["status"], sent["attempts"], sent["last_status_code"], sent["last_error"]) == (
        "notification.test",
        "succeeded",
        1,
        204,
        None,
    )
    [request] = posts(receiver)
    assert request.headers["webhook-id"] == sent["message_id"]
    message = verified(request, created["secret"])
    assert message["type"] == "notification.test"
    assert message["data"] == {
        "workspace_id": ws,
        "endpoint_id": created["id"],
        "message": "A test from pipelines-dagster.",
    }
    with pytest.raises(WebhookVerificationError):
        verified(request, create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")["secret"])

    text = cli("notification", "test", "--workspace", str(ws), "--endpoint", str(created["id"])).output
    assert f"to {receiver.url(HOOK)}: HTTP 204 in " in text
    assert posts(receiver)[-1].headers["webhook-id"] in text and len(posts(receiver)) == 2


def test_a_failed_test_delivery_exits_non_zero_and_is_logged(cli, workspace, receiver):
    receiver.route(HOOK, Reply(status=503, body="down for maintenance", content_type="text/plain"))
    ws = workspace["id"]
    created = create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")
    result = cli("notification", "test", "--workspace", str(ws), "--endpoint", str(created["id"]), "--json", ok=False)
    assert "Error: the endpoint did not take the test delivery (HTTP 503)" in result.output
    sent = json.loads(result.stdout)
    # A test is sent once: it failed, and is not retried.
    assert (sent["status"], sent["attempts"], sent["last_status_code"], sent["last_error"]) == (
        "failed",
        1,
        503,
        "HTTP 503",
    )
    [request] = posts(receiver)
    assert verified(request, created["secret"])["type"] == "notification.test"

    [logged] = deliveries(cli, ws, created["id"])
    assert logged == {field: value for field, value in sent.items() if field in NotificationDeliveryOut.model_fields}
    line = cli("notification", "deliveries", "--workspace", str(ws), "--endpoint", str(created["id"])).output.strip()
    assert line == f"{sent['id']}\tnotification.test\tfailed\t1 attempt\tHTTP 503\t{request.headers['webhook-id']}"

    receiver.stop()
    unreachable = cli("notification", "test", "--workspace", str(ws), "--endpoint", str(created["id"]), ok=False)
    assert "no answer in" in unreachable.output and "request failed" in unreachable.output


def test_deliveries_filters_by_status_and_limits_newest_first(cli, workspace, receiver):
    receiver.route(HOOK, Reply(status=500, content_type=None), Reply(status=204, content_type=None))
    ws = workspace["id"]
    endpoint_id = str(create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")["id"])
    failed = json.loads(
        cli("notification", "test", "--workspace", str(ws), "--endpoint", endpoint_id, "--json", ok=False).stdout
    )
    ids = [cli.json("notification", "test", "--workspace", str(ws), "--endpoint", endpoint_id)["id"] for _ in range(2)]
    assert [d["id"] for d in deliveries(cli, ws, int(endpoint_id))] == [ids[1], ids[0], failed["id"]]
    assert [d["id"] for d in deliveries(cli, ws, int(endpoint_id), "--status", "succeeded")] == ids[::-1]
    assert [d["last_status_code"] for d in deliveries(cli, ws, int(endpoint_id), "--status", "failed")] == [500]
    assert deliveries(cli, ws, int(endpoint_id), "--status", "pending") == []
    assert [d["id"] for d in deliveries(cli, ws, int(endpoint_id), "--limit", "1")] == [ids[1]]
    none = cli(
        "notification", "deliveries", "--workspace", str(ws), "--endpoint", endpoint_id, "--status", "pending"
    ).output
    assert f"notification endpoint {endpoint_id} has no deliveries" in none

    too_many = cli(
        "notification", "deliveries", "--workspace", str(ws), "--endpoint", endpoint_id, "--limit", "101", ok=False
    )
    assert "--limit: must be from 1 to 100" in too_many.output
    bogus = cli(
        "notification", "deliveries", "--workspace", str(ws), "--endpoint", endpoint_id, "--status", "lost", ok=False
    )
    assert "--status" in bogus.output


def test_rotate_secret_signs_with_both_secrets_until_the_overlap_ends(cli, workspace, receiver):
    ws = workspace["id"]
    created = create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")
    endpoint_id = str(created["id"])
    before = row_counts(cli.engine())
    rotate = ["notification", "rotate-secret", "--workspace", str(ws), "--endpoint", endpoint_id, "--overlap-seconds"]
    refused = cli(*rotate, "-1", ok=False)
    assert "--overlap-seconds: must be a whole number of seconds from 0" in refused.output
    assert row_counts(cli.engine()) == before

    rotated = cli.json(*rotate, "60")
    assert set(rotated) == set(RotatedEndpointOut.model_fields)
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != created["secret"]
    expires = datetime.fromisoformat(rotated["previous_secret_expires_at"])
    assert timedelta(seconds=50) < expires - datetime.now(UTC) <= timedelta(seconds=60)
    shown = cli.json("notification", "show", "--workspace", str(ws), "--endpoint", endpoint_id)
    assert shown["previous_secret_expires_at"] == rotated["previous_secret_expires_at"]
    cli("notification", "test", "--workspace", str(ws), "--endpoint", endpoint_id)
    during = posts(receiver)[-1]
    assert verified(during, created["secret"]) == verified(during, rotated["secret"])

    text = cli(*rotate, "0").output
    [newest] = [word for word in text.split() if word.startswith("whsec_")]
    assert "the previous secret signs no more" in text
    assert (
        cli.json("notification", "show", "--workspace", str(ws), "--endpoint", endpoint_id)[
            "previous_secret_expires_at"
        ]
        is None
    )
    cli("notification", "test", "--workspace", str(ws), "--endpoint", endpoint_id)
    after = posts(receiver)[-1]
    assert verified(after, newest)["type"] == "notification.test"
    for old in (created["secret"], rotated["secret"]):
        with pytest.raises(WebhookVerificationError):
            verified(after, old)


def run_failed(workspace_id: int) -> RunEventData:
    return RunEventData(
        workspace_id=workspace_id,
        pipeline_id=1,
        pipeline_name="Docs",
        run_id="run-1",
        status="failed",
        trigger="schedule",
        started_at=None,
        finished_at=None,
        duration_seconds=None,
        crawls=CrawlCounts(attempted=None, succeeded=None, empty=None, failed=None),
        documents=DocumentCounts(created=None, updated=None, unchanged=None),
        charged_micros=None,
        new_charge_micros=None,
        error="the site did not answer",
        will_retry=False,
        run_url=None,
    )


def test_disable_fails_pending_deliveries_and_redrive_resends_them_under_their_webhook_id(cli, workspace, receiver):
    receiver.route(HOOK, Reply(status=500, content_type=None), Reply(status=204, content_type=None))
    ws = workspace["id"]
    created = create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")
    endpoint_id = str(created["id"])
    with transaction(session_factory(cli.engine())) as session:
        [delivery_id] = queue_run_ended(session, run_failed(ws))
    assert sensor_tick() == "sent 1: 0 delivered, 1 to retry, 0 failed for good"

    disabled = cli.json("notification", "disable", "--workspace", str(ws), "--endpoint", endpoint_id)
    assert (disabled["enabled"], disabled["disabled_reason"]) == (False, "disabled by a user")
    [failed] = deliveries(cli, ws, created["id"], "--status", "failed")
    assert (failed["id"], failed["last_error"]) == (delivery_id, "endpoint disabled: disabled by a user")
    before = row_counts(cli.engine())
    refused = cli("notification", "redrive", "--workspace", str(ws), "--endpoint", endpoint_id, ok=False)
    assert f"Error: notification endpoint {endpoint_id} is disabled (disabled by a user); enable it first" in (
        refused.output
    )
    assert deliveries(cli, ws, created["id"]) == [failed] and row_counts(cli.engine()) == before

    enabled = cli.json("notification", "enable", "--workspace", str(ws), "--endpoint", endpoint_id)
    assert (enabled["enabled"], enabled["disabled_reason"]) == (True, None)
    redrive = ["notification", "redrive", "--workspace", str(ws), "--endpoint", endpoint_id]
    assert cli.json(*redrive) == {"redriven": 1}
    [redriven] = deliveries(cli, ws, created["id"])
    assert (redriven["status"], redriven["attempts"], redriven["message_id"]) == ("pending", 0, failed["message_id"])
    assert len(posts(receiver)) == 1

    assert sensor_tick() == "sent 1: 1 delivered, 0 to retry, 0 failed for good"
    first, again = posts(receiver)
    assert again.headers["webhook-id"] == first.headers["webhook-id"] == failed["message_id"]
    assert again.body == first.body and verified(again, created["secret"])["type"] == "run.failed"
    [delivered] = deliveries(cli, ws, created["id"])
    assert (delivered["status"], delivered["attempts"], delivered["last_status_code"]) == ("succeeded", 1, 204)
    assert "0 deliveries queued again" in cli(*redrive).output

    # Named, a delivery is sent again whatever its status.
    assert "1 delivery queued again" in cli(*redrive, "--delivery", str(delivery_id)).output
    assert sensor_tick() == "sent 1: 1 delivered, 0 to retry, 0 failed for good"
    assert [request.headers["webhook-id"] for request in posts(receiver)] == [failed["message_id"]] * 3


def test_redrive_refuses_a_delivery_of_another_endpoint(cli, workspace, receiver):
    ws = workspace["id"]
    first, second = (create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")["id"] for _ in range(2))
    delivery_id = cli.json("notification", "test", "--workspace", str(ws), "--endpoint", str(first))["id"]
    before, logged = row_counts(cli.engine()), deliveries(cli, ws, first)
    refused = cli(
        "notification",
        "redrive",
        "--workspace",
        str(ws),
        "--endpoint",
        str(second),
        "--delivery",
        str(delivery_id),
        ok=False,
    )
    assert f"delivery {delivery_id} is not a delivery of notification endpoint {second}" in refused.output
    assert row_counts(cli.engine()) == before and deliveries(cli, ws, first) == logged


def test_every_command_refuses_another_workspaces_endpoint(cli, workspace, receiver):
    ws = workspace["id"]
    endpoint_id = str(create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")["id"])
    other = str(cli.json("workspace", "create", "--name", "Other", "--owner", "user-2")["id"])
    shown, before = (
        cli.json("notification", "show", "--workspace", str(ws), "--endpoint", endpoint_id),
        row_counts(cli.engine()),
    )
    for command in ("show", "delete", "rotate-secret", "enable", "disable", "test", "deliveries", "redrive"):
        result = cli("notification", command, "--workspace", other, "--endpoint", endpoint_id, ok=False)
        assert f"notification endpoint {endpoint_id} does not exist in workspace {other}" in result.output, command
    assert "workspace 999999 does not exist" in cli("notification", "list", "--workspace", "999999", ok=False).output
    assert row_counts(cli.engine()) == before and posts(receiver) == []
    assert cli.json("notification", "show", "--workspace", str(ws), "--endpoint", endpoint_id) == shown


def test_delete_takes_the_deliveries_and_their_log_with_it(cli, workspace, receiver):
    ws = workspace["id"]
    endpoint_id = str(create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed")["id"])
    before = row_counts(cli.engine())
    cli("notification", "test", "--workspace", str(ws), "--endpoint", endpoint_id)
    during = row_counts(cli.engine())
    assert (during["notification_deliveries"], during["notification_attempts"]) == (
        before["notification_deliveries"] + 1,
        before["notification_attempts"] + 1,
    )
    cli("notification", "delete", "--workspace", str(ws), "--endpoint", endpoint_id)
    after = row_counts(cli.engine())
    assert after["notification_endpoints"] == before["notification_endpoints"] - 1
    assert (after["notification_deliveries"], after["notification_attempts"]) == (
        before["notification_deliveries"],
        before["notification_attempts"],
    )


def test_notification_commands_print_what_the_api_answers(cli, workspace, receiver, api):
    ws = workspace["id"]
    endpoints = f"/workspaces/{ws}/notifications"
    created = create(cli, ws, receiver.url(HOOK), "--event-type", "run.failed", "--description", "on-call")
    endpoint, by_id = f"{endpoints}/{created['id']}", ["--workspace", str(ws), "--endpoint", str(created["id"])]
    assert as_model(NewEndpointOut, created) == created
    assert {key: value for key, value in created.items() if key != "secret"} == api.get(endpoint).json()
    assert cli.json("notification", "list", "--workspace", str(ws)) == api.get(endpoints).json()
    for command in ("show", "disable", "enable"):
        assert cli.json("notification", command, *by_id) == api.get(endpoint).json(), command
    rotated = cli.json("notification", "rotate-secret", *by_id)
    assert as_model(RotatedEndpointOut, rotated) == rotated
    assert {key: value for key, value in rotated.items() if key != "secret"} == api.get(endpoint).json()

    sent = [cli.json("notification", "test", *by_id) for _ in range(3)]
    for delivery in sent:
        assert delivery == api.get(f"{endpoint}/deliveries/{delivery['id']}").json()
    first = cli.json("notification", "deliveries", *by_id, "--limit", "2")
    assert first == api.get(f"{endpoint}/deliveries", params={"limit": 2}).json()
    assert first["next_cursor"] == str(sent[1]["id"])
    rest = cli.json("notification", "deliveries", *by_id, "--limit", "2", "--cursor", first["next_cursor"])
    assert rest == api.get(f"{endpoint}/deliveries", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert rest["next_cursor"] is None
    assert [delivery["id"] for delivery in first["deliveries"] + rest["deliveries"]] == [d["id"] for d in sent[::-1]]
    assert f"more: --cursor {sent[1]['id']}" in cli("notification", "deliveries", *by_id, "--limit", "2").output

    with transaction(session_factory(cli.engine())) as session:
        [queued] = queue_run_ended(session, run_failed(ws))
    redriven = cli.json("notification", "redrive", *by_id, "--delivery", str(queued))
    assert as_model(RedriveOut, redriven) == redriven == {"redriven": 1}
    deleted = cli.json("notification", "delete", *by_id)
    assert as_model(DeletedOut, deleted) == deleted and api.get(endpoint).status_code == 404
