"""Trigger management, domain events and signed webhook deliveries over HTTP."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from pipelines_dagster.app_db.models import DomainEvent, WebhookDelivery
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore
from pipelines_dagster.core.storage.retention import apply_retention
from pipelines_dagster.core.triggers.webhooks import sign
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.webhooks import build_webhook_sensor
from pipelines_dagster.settings import Settings
from tests.api.conftest import Tenant
from tests.sensors.test_trigger_sensors import evaluate, requests_for
from tests.support.webhooks import standard_headers


def make_pipeline(client, tenant: Tenant, name: str = "docs") -> int:
    made = client.post(
        tenant.pipelines, headers=tenant.headers, json={"name": name, "connector_id": tenant.connector_id}
    )
    assert made.status_code == 201, made.text
    return made.json()["id"]


def new_webhook(client, tenant: Tenant, pipeline_id: int, signing: str | None = None) -> dict:
    made = client.post(
        f"{tenant.pipelines}/{pipeline_id}/triggers",
        headers=tenant.headers,
        json={"kind": "webhook", **({"signing": signing} if signing else {})},
    )
    assert made.status_code == 201, made.text
    return made.json()


def count(sessions, model) -> int:
    with sessions() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(model))


def test_a_webhook_trigger_shows_its_secret_once(client, tenant):
    pipeline_id = make_pipeline(client, tenant)
    hook = new_webhook(client, tenant, pipeline_id)
    assert hook["kind"] == "webhook" and hook["signing"] == "standard" and hook["secret"].startswith("whsec_")
    assert hook["secret"] not in hook["webhook_path"]
    listed = client.get(f"{tenant.pipelines}/{pipeline_id}/triggers", headers=tenant.headers).json()
    assert [(t["kind"], t["id"]) for t in listed["triggers"]][1:] == [("webhook", hook["id"])]
    assert hook["secret"] not in json.dumps(listed)
    again = client.post(f"{tenant.pipelines}/{pipeline_id}/triggers", headers=tenant.headers, json={"kind": "webhook"})
    assert again.status_code == 422 and "already has a webhook trigger" in again.text


def test_an_unknown_event_type_is_refused_when_the_trigger_is_created(client, tenant, sessions):
    pipeline_id = make_pipeline(client, tenant)
    path = f"{tenant.pipelines}/{pipeline_id}/triggers"
    refused = client.post(path, headers=tenant.headers, json={"kind": "event", "event_type": "page.updated"})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["field"] == "event_type"
    missing = client.post(path, headers=tenant.headers, json={"kind": "event"})
    assert missing.status_code == 422 and "needs an event type" in missing.text
    made = client.post(path, headers=tenant.headers, json={"kind": "event", "event_type": "folder.changed"})
    assert made.status_code == 201 and made.json()["event_type"] == "folder.changed"
    assert client.get(f"{path}/{made.json()['id']}", headers=tenant.headers).json() == made.json()
    gone = client.delete(f"{path}/{made.json()['id']}", headers=tenant.headers)
    assert gone.status_code == 204
    assert client.get(f"{path}/{made.json()['id']}", headers=tenant.headers).status_code == 404
    assert [t["kind"] for t in client.get(path, headers=tenant.headers).json()["triggers"]] == ["manual"]


def test_another_workspace_cannot_see_or_add_triggers(client, tenant, other):
    pipeline_id = make_pipeline(client, tenant)
    theirs = f"/workspaces/{tenant.workspace_id}/pipelines/{pipeline_id}/triggers"
    assert client.get(theirs, headers=other.headers).status_code == 404
    [manual] = client.get(theirs, headers=tenant.headers).json()["triggers"]
    assert client.get(f"{theirs}/{manual['id']}", headers=other.headers).status_code == 404
    assert (
        client.get(f"{other.pipelines}/{pipeline_id}/triggers/{manual['id']}", headers=other.headers).status_code == 404
    )
    mine = f"{other.pipelines}/{pipeline_id}/triggers"
    assert client.post(mine, headers=other.headers, json={"kind": "webhook"}).status_code == 404


def test_events_are_recorded_for_the_tokens_workspace(client, tenant, other, sessions):
    answer = client.post(
        f"/workspaces/{tenant.workspace_id}/events",
        headers=tenant.headers,
        json={"event_type": "refresh.requested", "payload": {"reason": "stale"}},
    )
    assert answer.status_code == 202, answer.text
    with sessions() as session:
        event = session.get(DomainEvent, answer.json()["event_id"])
    assert (event.workspace_id, event.payload) == (tenant.workspace_id, {"reason": "stale"})
    before = count(sessions, DomainEvent)
    assert (
        client.post(
            f"/workspaces/{tenant.workspace_id}/events", headers=other.headers, json={"event_type": "refresh.requested"}
        ).status_code
        == 404
    )
    assert (
        client.post(
            f"/workspaces/{tenant.workspace_id}/events", headers=tenant.headers, json={"event_type": "nope"}
        ).status_code
        == 422
    )
    assert count(sessions, DomainEvent) == before


def test_a_github_mode_trigger_is_signed_with_its_url_token(client, tenant):
    hook = new_webhook(client, tenant, make_pipeline(client, tenant), signing="github")
    assert hook["signing"] == "github" and hook["webhook_path"] == f"/webhooks/{hook['secret']}"


def test_bad_signing_input_is_refused_with_the_field_and_nothing_is_written(client, tenant):
    pipeline_id = make_pipeline(client, tenant)
    path = f"{tenant.pipelines}/{pipeline_id}/triggers"
    for body in (
        {"kind": "webhook", "signing": "svix"},
        {"kind": "event", "event_type": "folder.changed", "signing": "github"},
    ):
        refused = client.post(path, headers=tenant.headers, json=body)
        assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "signing", refused.text
    assert [t["kind"] for t in client.get(path, headers=tenant.headers).json()["triggers"]] == ["manual"]


def test_secret_rotation_over_http(client, tenant):
    pipeline_id = make_pipeline(client, tenant)
    hook = new_webhook(client, tenant, pipeline_id)
    rotate = f"{tenant.pipelines}/{pipeline_id}/triggers/{hook['id']}/rotate-secret"
    for bad in ({"overlap_seconds": -1}, {"overlap_seconds": 8 * 24 * 3600}):
        refused = client.post(rotate, headers=tenant.headers, json=bad)
        assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "overlap_seconds"
    rotated = client.post(rotate, headers=tenant.headers, json={"overlap_seconds": 600})
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()
    assert new["secret"].startswith("whsec_") and new["secret"] != hook["secret"]
    assert new["previous_secret_expires_at"] is not None
    body = b"{}"
    for n, secret in enumerate((hook["secret"], new["secret"])):
        headers = standard_headers(secret, body, webhook_id=f"rot-{n}", at=datetime.now(UTC))
        assert client.post(hook["webhook_path"], content=body, headers=headers).status_code == 202
    listed = client.get(f"{tenant.pipelines}/{pipeline_id}/triggers", headers=tenant.headers).json()["triggers"]
    [listed_hook] = [trigger for trigger in listed if trigger["id"] == hook["id"]]
    assert listed_hook["previous_secret_expires_at"] == new["previous_secret_expires_at"]
    assert new["secret"] not in json.dumps(listed)
    github = new_webhook(client, tenant, make_pipeline(client, tenant, name="gh"), signing="github")
    refused = client.post(
        f"{tenant.pipelines}/{github['pipeline_id']}/triggers/{github['id']}/rotate-secret", headers=tenant.headers
    )
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "signing"


def test_standard_webhook_deliveries_over_http(client, tenant, sessions):
    hook = new_webhook(client, tenant, make_pipeline(client, tenant))
    body = b'{"ref": "main"}'
    signed = standard_headers(hook["secret"], body, webhook_id="msg_1", at=datetime.now(UTC))
    before = count(sessions, WebhookDelivery)
    assert client.post(hook["webhook_path"], content=body).status_code == 401
    stale = standard_headers(hook["secret"], body, webhook_id="msg_1", at=datetime.now(UTC) - timedelta(seconds=301))
    assert client.post(hook["webhook_path"], content=body, headers=stale).status_code == 401
    assert client.post(hook["webhook_path"], content=body, headers={**signed, "webhook-id": "msg_2"}).status_code == 401
    assert count(sessions, WebhookDelivery) == before
    first = client.post(hook["webhook_path"], content=body, headers=signed)
    assert first.status_code == 202 and first.json()["duplicate"] is False
    again = client.post(hook["webhook_path"], content=body, headers=signed)
    assert again.status_code == 200 and again.json() == {**first.json(), "duplicate": True}
    assert count(sessions, WebhookDelivery) == before + 1


def test_github_webhook_deliveries_over_http(client, tenant, sessions):
    hook = new_webhook(client, tenant, make_pipeline(client, tenant), signing="github")
    body = b'{"ref": "main"}'
    signed = {"X-Hub-Signature-256": sign(body, hook["secret"]), "X-Delivery-Id": "gh-1"}
    before = count(sessions, WebhookDelivery)
    assert client.post(hook["webhook_path"], content=body).status_code == 401
    assert (
        client.post(
            hook["webhook_path"], content=body, headers={"X-Hub-Signature-256": sign(body, "not-the-secret")}
        ).status_code
        == 401
    )
    stale = {**signed, "X-Webhook-Timestamp": str(int(time.time()) - 301)}
    assert client.post(hook["webhook_path"], content=body, headers=stale).status_code == 401
    assert count(sessions, WebhookDelivery) == before
    first = client.post(hook["webhook_path"], content=body, headers=signed)
    assert first.status_code == 202 and first.json()["duplicate"] is False
    again = client.post(hook["webhook_path"], content=body, headers=signed)
    assert again.status_code == 200 and again.json() == {**first.json(), "duplicate": True}
    replayed = client.post(
        hook["webhook_path"],
        content=body,
        headers={"X-Hub-Signature-256": signed["X-Hub-Signature-256"], "X-Delivery-Id": "gh-2"},
    )
    assert replayed.status_code == 200 and replayed.json() == {**first.json(), "duplicate": True}
    assert count(sessions, WebhookDelivery) == before + 1
    huge = b"x" * (1024 * 1024 + 1)
    too_big = client.post(
        hook["webhook_path"], content=huge, headers={"X-Hub-Signature-256": sign(huge, hook["secret"])}
    )
    assert too_big.status_code == 413 and "1048576 bytes" in too_big.json()["detail"]
    assert (
        client.post(
            "/webhooks/whk_unknown", content=body, headers={"X-Hub-Signature-256": sign(body, "whk_unknown")}
        ).status_code
        == 401
    )


def test_a_captured_github_request_is_a_replay_after_retention_pruned_its_delivery(
    client, tenant, sessions, app_engine, instance, tmp_path
):
    pipeline_id = make_pipeline(client, tenant)
    hook = new_webhook(client, tenant, pipeline_id, signing="github")
    body = b'{"ref": "main", "after": "e3b0"}'
    captured = {"X-Hub-Signature-256": sign(body, hook["secret"]), "X-GitHub-Delivery": "gh-1"}
    first = client.post(hook["webhook_path"], content=body, headers=captured)
    assert first.status_code == 202 and first.json()["duplicate"] is False
    app_db = AppDatabaseResource(url=app_engine.url.render_as_string(hide_password=False))
    sensor = build_webhook_sensor(Settings())
    [run] = requests_for(evaluate(sensor, instance, app_db), pipeline_id)
    assert run.run_key == f"webhook:{first.json()['delivery_id']}"

    # The daily maintenance with its clock 31 days on: the delivery, body and all, is pruned.
    apply_retention(LocalBlobStore(tmp_path / "blobs"), sessions, now=datetime.now(UTC) + timedelta(days=31), days=30)
    of_trigger = sa.select(sa.func.count()).select_from(WebhookDelivery).where(WebhookDelivery.trigger_id == hook["id"])
    with sessions() as session:
        assert session.scalar(of_trigger) == 0

    again = client.post(hook["webhook_path"], content=body, headers={**captured, "X-GitHub-Delivery": "gh-2"})
    assert again.status_code == 200 and again.json() == {**first.json(), "duplicate": True}
    with sessions() as session:
        assert session.scalar(of_trigger) == 0
    assert requests_for(evaluate(sensor, instance, app_db), pipeline_id) == []


def test_the_access_log_never_prints_a_webhook_token(client, caplog):
    # uvicorn's access line: client, method, path, HTTP version, status.
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST", "/webhooks/whk_s3cr3t?x=1", "1.1", 202
        )
    assert caplog.messages == ['127.0.0.1:5000 - "POST /webhooks/<redacted>?x=1 HTTP/1.1" 202']


def test_a_seeded_template_is_shown_disabled_with_why_and_turned_on_over_http(client, tenant, other, sessions):
    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.app_db.models import PipelineTrigger
    from pipelines_dagster.core.catalog.seeding import SCHEDULE_OFF_REASON, seed_templates

    with transaction(sessions) as session:
        seed_templates(session, tenant.workspace_id)
    listed = client.get(tenant.pipelines, headers=tenant.headers).json()["pipelines"]
    [watch] = [pipeline for pipeline in listed if pipeline["template"] == "change_watch"]
    assert watch["enabled"] is False and watch["connector_id"] is None
    assert watch["disabled_reason"].startswith("a built-in template (change_watch), shipped disabled")
    assert watch["schedule"]["enabled"] is False and watch["schedule"]["disabled_reason"] == SCHEDULE_OFF_REASON
    path = f"{tenant.pipelines}/{watch['id']}"

    # Enabled with nothing to crawl: refused with the field, nothing written.
    refused = client.patch(path, headers=tenant.headers, json={"enabled": True})
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "enabled"
    assert client.get(path, headers=tenant.headers).json() == watch
    foreign = client.patch(path, headers=tenant.headers, json={"connector_id": other_connector(client, other)})
    assert foreign.status_code == 422 and foreign.json()["detail"][0]["field"] == "connector_id"

    turned_on = client.patch(path, headers=tenant.headers, json={"connector_id": tenant.connector_id, "enabled": True})
    assert turned_on.status_code == 200, turned_on.text
    assert (turned_on.json()["connector_id"], turned_on.json()["enabled"]) == (tenant.connector_id, True)
    assert turned_on.json()["disabled_reason"] is None and turned_on.json()["template"] == "change_watch"

    triggers = client.get(f"{path}/triggers", headers=tenant.headers).json()["triggers"]
    [schedule] = [trigger for trigger in triggers if trigger["kind"] == "schedule"]
    assert (schedule["schedule"], schedule["next_fire_at"]) == ("every 60 min", None)
    assert [trigger["kind"] for trigger in triggers if trigger["enabled"]] == ["manual", "event"]
    on = client.post(f"{path}/triggers/{schedule['id']}/enable", headers=tenant.headers)
    assert on.status_code == 200 and on.json()["enabled"] is True and on.json()["disabled_reason"] is None
    assert datetime.fromisoformat(on.json()["next_fire_at"]) > datetime.now(UTC)
    assert client.get(path, headers=tenant.headers).json()["schedule"]["enabled"] is True
    off = client.post(f"{path}/triggers/{schedule['id']}/disable", headers=tenant.headers)
    assert off.status_code == 200 and (off.json()["enabled"], off.json()["next_fire_at"]) == (False, None)
    with sessions() as session:
        assert session.get(PipelineTrigger, schedule["id"]).next_fire_at is None

    # Another workspace's token sees none of it.
    theirs = client.post(f"{path}/triggers/{schedule['id']}/enable", headers=other.headers)
    assert theirs.status_code == 404
    missing = client.post(f"{path}/triggers/999999/enable", headers=tenant.headers)
    assert missing.status_code == 404


def other_connector(client, other: Tenant) -> int:
    made = client.post(
        f"/workspaces/{other.workspace_id}/connectors",
        headers=other.headers,
        json={"type": "webcrawler", "urls": ["https://example.com/"]},
    )
    assert made.status_code == 201, made.text
    return made.json()["id"]
