"""Trigger management, domain events and signed webhook deliveries over HTTP."""

from __future__ import annotations

import json
import time

import sqlalchemy as sa

from pipelines_dagster.app_db.models import DomainEvent, WebhookDelivery
from pipelines_dagster.core.triggers import sign
from tests.api.conftest import Tenant


def make_pipeline(client, tenant: Tenant, name: str = "docs") -> int:
    made = client.post(tenant.pipelines, headers=tenant.headers,
                       json={"name": name, "connector_id": tenant.connector_id})
    assert made.status_code == 201, made.text
    return made.json()["id"]


def new_webhook(client, tenant: Tenant, pipeline_id: int) -> dict:
    made = client.post(f"{tenant.pipelines}/{pipeline_id}/triggers", headers=tenant.headers,
                       json={"kind": "webhook"})
    assert made.status_code == 201, made.text
    return made.json()


def count(sessions, model) -> int:
    with sessions() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(model))


def test_a_webhook_trigger_shows_its_secret_once(client, tenant):
    pipeline_id = make_pipeline(client, tenant)
    hook = new_webhook(client, tenant, pipeline_id)
    assert hook["webhook_path"] == f"/webhooks/{hook['secret']}" and hook["kind"] == "webhook"
    listed = client.get(f"{tenant.pipelines}/{pipeline_id}/triggers", headers=tenant.headers).json()
    assert [t["id"] for t in listed["triggers"]] == [hook["id"]]
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
    gone = client.delete(f"{path}/{made.json()['id']}", headers=tenant.headers)
    assert gone.status_code == 204
    assert client.get(path, headers=tenant.headers).json()["triggers"] == []


def test_another_workspace_cannot_see_or_add_triggers(client, tenant, other):
    pipeline_id = make_pipeline(client, tenant)
    theirs = f"/workspaces/{tenant.workspace_id}/pipelines/{pipeline_id}/triggers"
    assert client.get(theirs, headers=other.headers).status_code == 404
    mine = f"{other.pipelines}/{pipeline_id}/triggers"
    assert client.post(mine, headers=other.headers, json={"kind": "webhook"}).status_code == 404


def test_events_are_recorded_for_the_tokens_workspace(client, tenant, other, sessions):
    answer = client.post(f"/workspaces/{tenant.workspace_id}/events", headers=tenant.headers,
                         json={"event_type": "refresh.requested", "payload": {"reason": "stale"}})
    assert answer.status_code == 202, answer.text
    with sessions() as session:
        event = session.get(DomainEvent, answer.json()["event_id"])
    assert (event.workspace_id, event.payload) == (tenant.workspace_id, {"reason": "stale"})
    before = count(sessions, DomainEvent)
    assert client.post(f"/workspaces/{tenant.workspace_id}/events", headers=other.headers,
                       json={"event_type": "refresh.requested"}).status_code == 404
    assert client.post(f"/workspaces/{tenant.workspace_id}/events", headers=tenant.headers,
                       json={"event_type": "nope"}).status_code == 422
    assert count(sessions, DomainEvent) == before


def test_webhook_deliveries_over_http(client, tenant, sessions):
    hook = new_webhook(client, tenant, make_pipeline(client, tenant))
    body = b'{"ref": "main"}'
    signed = {"X-Hub-Signature-256": sign(body, hook["secret"]), "X-Delivery-Id": "gh-1"}
    before = count(sessions, WebhookDelivery)
    assert client.post(hook["webhook_path"], content=body).status_code == 401
    assert client.post(hook["webhook_path"], content=body,
                       headers={"X-Hub-Signature-256": sign(body, "not-the-secret")}).status_code == 401
    stale = {**signed, "X-Webhook-Timestamp": str(int(time.time()) - 301)}
    assert client.post(hook["webhook_path"], content=body, headers=stale).status_code == 401
    assert count(sessions, WebhookDelivery) == before
    first = client.post(hook["webhook_path"], content=body, headers=signed)
    assert first.status_code == 202 and first.json()["duplicate"] is False
    again = client.post(hook["webhook_path"], content=body, headers=signed)
    assert again.status_code == 200 and again.json() == {**first.json(), "duplicate": True}
    assert count(sessions, WebhookDelivery) == before + 1
    huge = b"x" * (1024 * 1024 + 1)
    too_big = client.post(hook["webhook_path"], content=huge,
                          headers={"X-Hub-Signature-256": sign(huge, hook["secret"])})
    assert too_big.status_code == 413 and "1048576 bytes" in too_big.json()["detail"]
    assert client.post("/webhooks/whk_unknown", content=body,
                       headers={"X-Hub-Signature-256": sign(body, "whk_unknown")}).status_code == 401
