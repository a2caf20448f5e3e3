"""Notification endpoints over HTTP: management, the destination guard, signing across a rotation, test
sends to a real receiver on 127.0.0.1, the delivery log, redrive, and the page change a message links to."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import NotificationAttempt, NotificationDelivery, NotificationEndpoint
from pipelines_dagster.core.crawl.health import CrawlHealth
from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.kb.changes import record_changes
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.events import queue_credits_low, queue_pages_changed
from pipelines_dagster.notifications.payloads import TEST_EVENT, NotificationEvent
from pipelines_dagster.notifications.sender import Sender
from tests.api.conftest import LOOPBACK_ALLOWED, Tenant, settings_for
from tests.api.test_triggers import count, make_pipeline
from tests.support.web import Reply, Request, WebServer, confine_to_loopback

HOOK = "/hook"
# Where the TestClient serves the app: links built on it can be followed with the client.
API_URL = "http://testserver"


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    # A guard that let a notification through to anywhere else fails its test instead of sending it.
    confine_to_loopback(monkeypatch)


@pytest.fixture
def receiver() -> Iterator[WebServer]:
    """Answers 204 to every notification on /hook, unless a test routes it otherwise."""
    with WebServer() as server:
        server.route(HOOK, Reply(status=204, content_type=None))
        yield server


@pytest.fixture
def loopback(app_engine, instance, client_for, nowhere, tmp_path) -> TestClient:
    """The app of a deployment that lets the crawler, and so notifications, reach 127.0.0.1."""
    return client_for(settings_for(app_engine, tmp_path / "data", **LOOPBACK_ALLOWED), instance, nowhere)


def notifications(tenant: Tenant) -> str:
    return f"/workspaces/{tenant.workspace_id}/notifications"


def new_endpoint(client: TestClient, tenant: Tenant, url: str, **fields) -> dict:
    made = client.post(
        notifications(tenant), headers=tenant.headers, json={"url": url, "event_types": ["run.failed"], **fields}
    )
    assert made.status_code == 201, made.text
    return made.json()


def shown(made: dict) -> dict:
    """An endpoint as every answer but its creation's shows it: without the secret."""
    return {name: value for name, value in made.items() if name != "secret"}


def posts(server: WebServer) -> list[Request]:
    return [request for request in server.requests if request.method == "POST" and request.path == HOOK]


def signed_headers(request: Request) -> dict[str, str]:
    return {name: request.headers[name] for name in ("webhook-id", "webhook-timestamp", "webhook-signature")}


def crawl(sessions, tenant: Tenant, pipeline_id: int, run_id: str, pages: dict[str, str]) -> None:
    """Record a crawl of `pages` (URL: text) on the timeline, with its pages.changed queued as the asset does."""
    record_changes(
        sessions,
        workspace_id=tenant.workspace_id,
        pipeline_id=pipeline_id,
        run_id=run_id,
        records=[CrawlRecord(url=url, status="success", content=text, http_status=200) for url, text in pages.items()],
        health=CrawlHealth(healthy=True, complete=True, why="every page succeeded"),
        on_recorded=lambda session: queue_pages_changed(
            session, workspace_id=tenant.workspace_id, pipeline_id=pipeline_id, run_id=run_id, api_url=API_URL
        ),
    )


def test_an_endpoint_is_created_listed_read_and_deleted_with_its_deliveries(loopback, tenant, receiver, sessions):
    pipeline_id = make_pipeline(loopback, tenant)
    made = new_endpoint(
        loopback,
        tenant,
        receiver.url(HOOK),
        event_types=["run.failed", "credits.low", "run.failed"],
        pipeline_ids=[pipeline_id],
        credits_below_micros=5_000,
        description="  On-call  ",
    )
    assert made["secret"].startswith("whsec_")
    assert shown(made) == {
        "id": made["id"],
        "url": receiver.url(HOOK),
        "description": "On-call",
        "event_types": ["run.failed", "credits.low"],
        "pipeline_ids": [pipeline_id],
        "credits_below_micros": 5_000,
        "enabled": True,
        "disabled_reason": None,
        "failing_since": None,
        "previous_secret_expires_at": None,
        "created_at": made["created_at"],
    }
    second = new_endpoint(loopback, tenant, receiver.url(HOOK), event_types=["pages.changed"])
    assert second["pipeline_ids"] is None and second["credits_below_micros"] is None
    listed = loopback.get(notifications(tenant), headers=tenant.headers)
    assert listed.status_code == 200
    assert listed.json() == {"endpoints": [shown(made), shown(second)]}
    assert made["secret"] not in listed.text and second["secret"] not in listed.text
    path = f"{notifications(tenant)}/{made['id']}"
    assert loopback.get(path, headers=tenant.headers).json() == shown(made)

    logged = count(sessions, NotificationDelivery), count(sessions, NotificationAttempt)
    assert loopback.post(f"{path}/test", headers=tenant.headers).json()["status"] == "succeeded"
    assert (count(sessions, NotificationDelivery), count(sessions, NotificationAttempt)) == (
        logged[0] + 1,
        logged[1] + 1,
    )
    assert loopback.delete(path, headers=tenant.headers).status_code == 204
    gone = loopback.get(path, headers=tenant.headers)
    assert gone.status_code == 404 and gone.json() == {
        "detail": f"notification endpoint {made['id']} does not exist in workspace {tenant.workspace_id}"
    }
    assert loopback.delete(path, headers=tenant.headers).status_code == 404
    assert loopback.get(notifications(tenant), headers=tenant.headers).json() == {"endpoints": [shown(second)]}
    assert (count(sessions, NotificationDelivery), count(sessions, NotificationAttempt)) == logged


def test_bad_input_is_refused_by_field_and_nothing_is_written(loopback, tenant, other, receiver, sessions):
    url = receiver.url(HOOK)
    theirs = make_pipeline(loopback, other)
    before = count(sessions, NotificationEndpoint)
    refusals = [
        ({"url": url, "event_types": ["run.exploded"]}, "event_types[0]"),
        ({"url": url, "event_types": ["notification.test"]}, "event_types[0]"),
        ({"url": url, "event_types": []}, "event_types"),
        ({"url": url}, "event_types"),
        ({"event_types": ["run.failed"]}, "url"),
        ({"url": "ftp://127.0.0.1/hook", "event_types": ["run.failed"]}, "url"),
        ({"url": "127.0.0.1/hook", "event_types": ["run.failed"]}, "url"),
        ({"url": "http://10.1.2.3/hook", "event_types": ["run.failed"]}, "url"),
        ({"url": url, "event_types": ["credits.low"]}, "credits_below_micros"),
        ({"url": url, "event_types": ["credits.low"], "credits_below_micros": 0}, "credits_below_micros"),
        ({"url": url, "event_types": ["credits.low"], "credits_below_micros": 10**13}, "credits_below_micros"),
        ({"url": url, "event_types": ["credits.low"], "credits_below_micros": True}, "credits_below_micros"),
        ({"url": url, "event_types": ["run.failed"], "credits_below_micros": 500}, "credits_below_micros"),
        ({"url": url, "event_types": ["run.failed"], "pipeline_ids": [theirs]}, "pipeline_ids"),
        ({"url": url, "event_types": ["run.failed"], "pipeline_ids": []}, "pipeline_ids"),
        ({"url": url, "event_types": ["run.failed"], "pipeline_ids": [0]}, "pipeline_ids[0]"),
        ({"url": url, "event_types": ["run.failed"], "description": "   "}, "description"),
        ({"url": url, "event_types": ["run.failed"], "events": ["run.failed"]}, "events"),
    ]
    for body, field in refusals:
        refused = loopback.post(notifications(tenant), headers=tenant.headers, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert [error["field"] for error in refused.json()["detail"]] == [field], (body, refused.text)
    assert count(sessions, NotificationEndpoint) == before
    foreign = loopback.post(
        notifications(tenant),
        headers=tenant.headers,
        json={"url": url, "event_types": ["run.failed"], "pipeline_ids": [theirs]},
    )
    assert foreign.json()["detail"][0]["message"] == f"no pipeline {theirs} in workspace {tenant.workspace_id}"


def test_a_private_or_loopback_address_is_refused_unless_the_deployment_allows_it(
    client, loopback, tenant, receiver, sessions
):
    before = count(sessions, NotificationEndpoint)
    for url in (
        receiver.url(HOOK),
        receiver.url(HOOK, host="localhost"),
        f"http://[::1]:{receiver.port}{HOOK}",
        "http://169.254.169.254/latest/meta-data/",
        "http://192.168.1.10/hook",
        "http://[2002:7f00:1::1]/hook",
        "http://[2002:a9fe:a9fe::1]/latest/meta-data/",
        "http://[fec0::1]/hook",
    ):
        refused = client.post(
            notifications(tenant), headers=tenant.headers, json={"url": url, "event_types": ["run.failed"]}
        )
        assert refused.status_code == 422, (url, refused.text)
        [error] = refused.json()["detail"]
        assert error["field"] == "url" and "PIPELINES_CRAWLER_ALLOWED_NETWORKS" in error["message"], url
    assert count(sessions, NotificationEndpoint) == before
    # The deployment that allows 127.0.0.1/32 takes the receiver, and still nothing else.
    assert new_endpoint(loopback, tenant, receiver.url(HOOK))["url"] == receiver.url(HOOK)
    metadata = {"url": "http://169.254.169.254/latest/meta-data/", "event_types": ["run.failed"]}
    assert loopback.post(notifications(tenant), headers=tenant.headers, json=metadata).status_code == 422
    assert count(sessions, NotificationEndpoint) == before + 1


def test_another_workspace_gets_404_for_an_endpoint_and_changes_nothing(loopback, tenant, other, receiver, sessions):
    made = new_endpoint(loopback, tenant, receiver.url(HOOK))
    sent = loopback.post(f"{notifications(tenant)}/{made['id']}/test", headers=tenant.headers).json()
    deliveries = count(sessions, NotificationDelivery)
    theirs = f"{notifications(other)}/{made['id']}"
    for method, suffix in [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/rotate-secret"),
        ("POST", "/enable"),
        ("POST", "/disable"),
        ("POST", "/test"),
        ("GET", "/deliveries"),
        ("GET", f"/deliveries/{sent['id']}"),
        ("POST", "/redrive"),
    ]:
        answer = loopback.request(method, theirs + suffix, headers=other.headers)
        assert answer.status_code == 404, (method, suffix, answer.text)
        assert answer.json() == {
            "detail": f"notification endpoint {made['id']} does not exist in workspace {other.workspace_id}"
        }
    mine = f"{notifications(tenant)}/{made['id']}"
    assert loopback.get(mine, headers=other.headers).json() == {"detail": f"workspace {tenant.workspace_id} not found"}
    # Their own endpoint does not open the tenant's deliveries either.
    own = new_endpoint(loopback, other, receiver.url(HOOK))
    foreign = loopback.get(f"{notifications(other)}/{own['id']}/deliveries/{sent['id']}", headers=other.headers)
    assert foreign.status_code == 404
    assert loopback.get(notifications(other), headers=other.headers).json() == {"endpoints": [shown(own)]}
    assert loopback.get(mine, headers=tenant.headers).json() == shown(made)
    assert count(sessions, NotificationDelivery) == deliveries and len(posts(receiver)) == 1


def test_a_rotated_secret_signs_alongside_the_previous_one_until_the_overlap_ends(loopback, tenant, receiver):
    made = new_endpoint(loopback, tenant, receiver.url(HOOK))
    path = f"{notifications(tenant)}/{made['id']}"
    for bad in ({"overlap_seconds": -1}, {"overlap_seconds": 7 * 24 * 3600 + 1}, {"overlap_seconds": "soon"}):
        refused = loopback.post(f"{path}/rotate-secret", headers=tenant.headers, json=bad)
        assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "overlap_seconds", bad
    started = datetime.now(UTC)
    rotated = loopback.post(f"{path}/rotate-secret", headers=tenant.headers, json={"overlap_seconds": 600})
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()
    assert new["secret"].startswith("whsec_") and new["secret"] != made["secret"]
    expires = datetime.fromisoformat(new["previous_secret_expires_at"])
    assert started + timedelta(seconds=600) <= expires <= datetime.now(UTC) + timedelta(seconds=600)
    read = loopback.get(path, headers=tenant.headers)
    assert read.json() == shown(new) and new["secret"] not in read.text and made["secret"] not in read.text

    sent = loopback.post(f"{path}/test", headers=tenant.headers).json()
    [request] = posts(receiver)
    assert len(request.headers["webhook-signature"].split()) == 2
    for secret in (made["secret"], new["secret"]):
        assert Webhook(secret).verify(request.body, signed_headers(request)) == sent["payload"]

    # Without an overlap only the newest secret signs, and the previous ones verify nothing.
    last = loopback.post(f"{path}/rotate-secret", headers=tenant.headers, json={"overlap_seconds": 0}).json()
    assert last["previous_secret_expires_at"] is None
    loopback.post(f"{path}/test", headers=tenant.headers)
    request = posts(receiver)[-1]
    assert Webhook(last["secret"]).verify(request.body, signed_headers(request))["type"] == "notification.test"
    for old in (made["secret"], new["secret"]):
        with pytest.raises(WebhookVerificationError):
            Webhook(old).verify(request.body, signed_headers(request))

    # No body: the default overlap of a day.
    started = datetime.now(UTC)
    default = loopback.post(f"{path}/rotate-secret", headers=tenant.headers).json()
    expires = datetime.fromisoformat(default["previous_secret_expires_at"])
    assert started + timedelta(days=1) <= expires <= datetime.now(UTC) + timedelta(days=1)


def test_the_test_route_sends_at_once_and_answers_the_attempt(loopback, tenant, receiver, sessions):
    receiver.route(HOOK, Reply(status=204, content_type=None, delay=0.2))
    made = new_endpoint(loopback, tenant, receiver.url(HOOK), event_types=["credits.low"], credits_below_micros=1000)
    path = f"{notifications(tenant)}/{made['id']}"
    answer = loopback.post(f"{path}/test", headers=tenant.headers)
    assert answer.status_code == 200, answer.text
    sent = answer.json()
    [request] = posts(receiver)
    assert request.headers["webhook-id"] == sent["message_id"] and json.loads(request.body) == sent["payload"]
    assert sent["event_type"] == sent["payload"]["type"] == "notification.test"
    assert sent["payload"]["data"] == {
        "workspace_id": tenant.workspace_id,
        "endpoint_id": made["id"],
        "message": "A test from pipelines-dagster.",
    }
    assert (sent["status"], sent["attempts"], sent["last_status_code"], sent["last_error"]) == (
        "succeeded",
        1,
        204,
        None,
    )
    assert sent["delivered_at"] is not None and sent["next_attempt_at"] is None
    [attempt] = sent["attempt_log"]
    assert (attempt["status_code"], attempt["error"], attempt["succeeded"]) == (204, None, True)
    assert 200 <= attempt["duration_ms"] < 10_000
    assert loopback.get(f"{path}/deliveries/{sent['id']}", headers=tenant.headers).json() == sent

    # A refusing receiver: the attempt says why. A test is sent once and says nothing of the endpoint's health.
    receiver.route(HOOK, Reply(status=503, body="down", content_type="text/plain"))
    failed = loopback.post(f"{path}/test", headers=tenant.headers).json()
    assert (failed["status"], failed["attempts"], failed["last_status_code"]) == ("failed", 1, 503)
    assert failed["next_attempt_at"] is None and failed["delivered_at"] is None
    assert [(a["status_code"], a["error"], a["succeeded"]) for a in failed["attempt_log"]] == [(503, "HTTP 503", False)]
    assert loopback.get(path, headers=tenant.headers).json()["failing_since"] is None

    # A disabled endpoint is still sent its test; nothing listening is an error without a status code.
    receiver.stop()
    loopback.post(f"{path}/disable", headers=tenant.headers)
    unreachable = loopback.post(f"{path}/test", headers=tenant.headers).json()
    [attempt] = unreachable["attempt_log"]
    assert attempt["status_code"] is None and attempt["error"].startswith("request failed")
    ours = [sent["id"], failed["id"], unreachable["id"]]
    with sessions() as session:
        logged = session.scalars(
            sa.select(NotificationAttempt.delivery_id)
            .where(NotificationAttempt.delivery_id.in_(ours))
            .order_by(NotificationAttempt.id)
        ).all()
    assert logged == ours


def test_deliveries_are_paged_newest_first_and_failed_ones_redriven(loopback, tenant, receiver, sessions):
    receiver.route(HOOK, Reply(status=500, content_type=None))
    made = new_endpoint(loopback, tenant, receiver.url(HOOK), event_types=["pages.changed"])
    path = f"{notifications(tenant)}/{made['id']}"
    pipeline_id = make_pipeline(loopback, tenant)
    for n in range(3):
        crawl(sessions, tenant, pipeline_id, f"run-{n}", {"https://docs.example.com/a": f"Version {n}."})
    ids = [d["id"] for d in loopback.get(f"{path}/deliveries", headers=tenant.headers).json()["deliveries"]][::-1]
    # The sender's pass: each is refused once and waits for its retry, until the endpoint is disabled.
    sender = Sender(sessions, DestinationGuard(NetworkPolicy(allowed_networks=("127.0.0.1/32",))))
    sender.send_due()
    disabled = loopback.post(f"{path}/disable", headers=tenant.headers).json()
    assert (disabled["enabled"], disabled["disabled_reason"]) == (False, "disabled by a user")

    def page(**params) -> dict:
        answer = loopback.get(f"{path}/deliveries", headers=tenant.headers, params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()

    failed = page(status="failed")
    assert [d["id"] for d in failed["deliveries"]] == ids[::-1] and failed["next_cursor"] is None
    assert {(d["attempts"], d["last_error"]) for d in failed["deliveries"]} == {
        (1, "endpoint disabled: disabled by a user")
    }
    assert "payload" not in failed["deliveries"][0]
    first = page(limit=2)
    assert [d["id"] for d in first["deliveries"]] == [ids[2], ids[1]] and first["next_cursor"] == str(ids[1])
    rest = page(limit=2, cursor=first["next_cursor"])
    assert [d["id"] for d in rest["deliveries"]] == [ids[0]] and rest["next_cursor"] is None
    assert page(limit=3)["next_cursor"] is None
    assert page(status="pending")["deliveries"] == []
    invalid = loopback.get(
        f"{path}/deliveries", headers=tenant.headers, params={"status": "lost", "limit": 0, "cursor": "x"}
    )
    assert invalid.status_code == 422
    assert {error["field"] for error in invalid.json()["detail"]} == {"status", "limit", "cursor"}

    refused = loopback.post(f"{path}/redrive", headers=tenant.headers, json={"delivery_ids": None})
    assert refused.status_code == 409 and "enable it first" in refused.json()["detail"]
    enabled = loopback.post(f"{path}/enable", headers=tenant.headers).json()
    assert (enabled["enabled"], enabled["disabled_reason"], enabled["failing_since"]) == (True, None, None)

    elsewhere = new_endpoint(loopback, tenant, receiver.url(HOOK))
    stranger = loopback.post(f"{notifications(tenant)}/{elsewhere['id']}/test", headers=tenant.headers).json()
    foreign = loopback.post(f"{path}/redrive", headers=tenant.headers, json={"delivery_ids": [ids[0], stranger["id"]]})
    assert foreign.status_code == 404
    assert page(status="failed")["deliveries"] == failed["deliveries"]

    receiver.route(HOOK, Reply(status=204, content_type=None))
    one = loopback.post(f"{path}/redrive", headers=tenant.headers, json={"delivery_ids": [ids[0]]})
    assert one.status_code == 200 and one.json() == {"redriven": 1}
    assert [d["id"] for d in page(status="failed")["deliveries"]] == [ids[2], ids[1]]
    assert loopback.post(f"{path}/redrive", headers=tenant.headers).json() == {"redriven": 2}
    pending = page(status="pending")["deliveries"]
    assert [(d["id"], d["attempts"]) for d in pending] == [(ids[2], 0), (ids[1], 0), (ids[0], 0)]
    assert (
        loopback.get(
            f"{notifications(tenant)}/{elsewhere['id']}/deliveries/{stranger['id']}", headers=tenant.headers
        ).json()
        == stranger
    )

    # Due now, the sender's next pass sends them again under their webhook-ids, with the bodies first sent.
    assert all(datetime.fromisoformat(d["next_attempt_at"]) <= datetime.now(UTC) for d in pending)
    assert {(d["last_status_code"], d["last_error"]) for d in pending} == {(None, None)}
    ours = {d["message_id"] for d in pending}
    first_sends = {request.headers["webhook-id"]: request.body for request in posts(receiver)}
    sent_before = len(posts(receiver))
    sender.send_due()
    resent = [request for request in posts(receiver)[sent_before:] if request.headers["webhook-id"] in ours]
    assert {request.headers["webhook-id"]: request.body for request in resent} == {
        message_id: first_sends[message_id] for message_id in ours
    }
    assert [d["status"] for d in page()["deliveries"]] == ["succeeded"] * 3


def test_a_pages_changed_diff_url_answers_the_change_with_its_diff(loopback, tenant, other, receiver, sessions):
    pipeline_id = make_pipeline(loopback, tenant)
    made = new_endpoint(loopback, tenant, receiver.url(HOOK), event_types=["pages.changed"])
    page_url = "https://docs.example.com/a"
    crawl(sessions, tenant, pipeline_id, "run-1", {page_url: "Alpha."})
    crawl(sessions, tenant, pipeline_id, "run-2", {page_url: "Alpha, edited."})
    path = f"{notifications(tenant)}/{made['id']}"
    listed = loopback.get(f"{path}/deliveries", headers=tenant.headers).json()["deliveries"]
    assert [d["event_type"] for d in listed] == ["pages.changed", "pages.changed"]
    newest, oldest = (
        loopback.get(f"{path}/deliveries/{d['id']}", headers=tenant.headers).json()["payload"]["data"] for d in listed
    )
    [changed] = newest["changes"]
    assert changed["status"] == "changed" and newest["changes_url"].startswith(API_URL)
    answer = loopback.get(changed["diff_url"], headers=tenant.headers)
    assert answer.status_code == 200, answer.text
    change = answer.json()
    assert (change["id"], change["url"], change["status"], change["run_id"]) == (
        changed["change_id"],
        page_url,
        "changed",
        "run-2",
    )
    assert "-Alpha.\n" in change["diff"] and "+Alpha, edited.\n" in change["diff"]
    assert change["previous_hash"] != change["current_hash"] and "pipeline_id" not in change
    [new] = oldest["changes"]
    assert new["diff_url"] is None
    first = loopback.get(f"{tenant.pipelines}/{pipeline_id}/changes/{new['change_id']}", headers=tenant.headers).json()
    assert (first["status"], first["diff"], first["run_id"]) == ("new", None, "run-1")

    assert loopback.get(changed["diff_url"], headers=other.headers).status_code == 404
    theirs = make_pipeline(loopback, other)
    foreign = loopback.get(f"{other.pipelines}/{theirs}/changes/{changed['change_id']}", headers=other.headers)
    assert foreign.status_code == 404
    assert foreign.json() == {"detail": f"pipeline {theirs} has no page change {changed['change_id']}"}
    sibling = make_pipeline(loopback, tenant, name="sibling")
    assert (
        loopback.get(f"{tenant.pipelines}/{sibling}/changes/{changed['change_id']}", headers=tenant.headers).status_code
        == 404
    )
    missing = loopback.get(
        f"{tenant.pipelines}/{pipeline_id}/changes/{changed['change_id'] + 1000}", headers=tenant.headers
    )
    assert missing.status_code == 404


def test_the_openapi_webhooks_document_the_messages_as_sent(loopback, tenant, receiver, sessions):
    document = loopback.get("/openapi.json").json()
    assert set(document["webhooks"]) == {*NotificationEvent, TEST_EVENT}
    for operations in document["webhooks"].values():
        headers = {p["name"] for p in operations["post"]["parameters"] if p["in"] == "header" and p["required"]}
        assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}

    def documented(event_type: str) -> Draft202012Validator:
        body = document["webhooks"][event_type]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return Draft202012Validator({**body, "components": document["components"]})

    made = new_endpoint(
        loopback, tenant, receiver.url(HOOK), event_types=["pages.changed", "credits.low"], credits_below_micros=1000
    )
    path = f"{notifications(tenant)}/{made['id']}"
    loopback.post(f"{path}/test", headers=tenant.headers)
    crawl(sessions, tenant, make_pipeline(loopback, tenant), "run-1", {"https://docs.example.com/a": "Alpha."})
    with transaction(sessions) as session:
        queue_credits_low(
            session, workspace_id=tenant.workspace_id, balance_before=1500, balance_after=500, ledger_entry_id=1
        )
    bodies = [
        loopback.get(f"{path}/deliveries/{d['id']}", headers=tenant.headers).json()["payload"]
        for d in loopback.get(f"{path}/deliveries", headers=tenant.headers).json()["deliveries"]
    ]
    assert sorted(body["type"] for body in bodies) == ["credits.low", "notification.test", "pages.changed"]
    [sent] = posts(receiver)
    assert json.loads(sent.body) in bodies
    for body in bodies:
        documented(body["type"]).validate(body)
    # The documented schemas hold the payloads' fields: a message without them is not one.
    pages = next(body for body in bodies if body["type"] == "pages.changed")
    assert not documented("pages.changed").is_valid({**pages, "data": {"workspace_id": tenant.workspace_id}})
    assert not documented("credits.low").is_valid(pages)
