"""Webhook deliveries (signature, replay window, dedupe, size) and domain events."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import PipelineTrigger, WebhookDelivery
from pipelines_dagster.core import catalog
from pipelines_dagster.core.triggers import (
    DeliveryRejected,
    EventType,
    accept_delivery,
    create_event_trigger,
    create_webhook_trigger,
    emit_event,
    sign,
    trigger_payload,
)
from pipelines_dagster.core.validation import InvalidInputError

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def pipeline(sessions) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = catalog.create_workspace(session, name="acme", owner_user_id="u").workspace
        made = catalog.create_pipeline(session, workspace_id=workspace.id, connector_id=None,
                                       name=f"p-{uuid.uuid4().hex[:6]}")
        return workspace.id, made.id


@pytest.fixture
def webhook(sessions, pipeline) -> str:
    with transaction(sessions) as session:
        return create_webhook_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1]).token


def deliver(sessions, token: str, body: bytes, **headers: str):
    with transaction(sessions) as session:
        return accept_delivery(session, token=token, body=body, headers=headers, now=NOW)


def deliveries(sessions) -> int:
    with sessions() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(WebhookDelivery))


def test_only_the_token_hash_is_stored(sessions, webhook):
    with sessions() as session:
        hashes = session.scalars(sa.select(PipelineTrigger.webhook_secret_hash)
                                 .where(PipelineTrigger.kind == "webhook")).all()
    assert webhook not in hashes and catalog.hash_token(webhook) in hashes


def test_a_signed_delivery_is_stored_with_its_payload(sessions, webhook):
    body = b'{"ref": "main"}'
    accepted = deliver(sessions, webhook, body, **{"X-Hub-Signature-256": sign(body, webhook), "X-Delivery-Id": "d-1"})
    assert not accepted.duplicate
    with sessions() as session:
        assert trigger_payload(session, {"webhook_delivery_id": str(accepted.delivery_id)}) == {"ref": "main"}


@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "sha1=abc", "garbage"])
def test_a_missing_or_wrong_signature_is_401_and_stores_nothing(sessions, webhook, signature):
    before = deliveries(sessions)
    headers = {"X-Hub-Signature-256": signature} if signature else {}
    with pytest.raises(DeliveryRejected) as rejected:
        deliver(sessions, webhook, b"{}", **headers)
    assert rejected.value.status == 401 and deliveries(sessions) == before


def test_an_unknown_token_is_401(sessions, webhook):
    other = "whk_" + "x" * 43
    with pytest.raises(DeliveryRejected) as rejected:
        deliver(sessions, other, b"{}", **{"X-Hub-Signature-256": sign(b"{}", other)})
    assert rejected.value.status == 401


def test_a_redelivery_is_accepted_once(sessions, webhook):
    body = b'{"n": 1}'
    headers = {"X-Hub-Signature-256": sign(body, webhook), "X-GitHub-Delivery": "abc-123"}
    first = deliver(sessions, webhook, body, **headers)
    again = deliver(sessions, webhook, body, **headers)
    assert again.duplicate and again.delivery_id == first.delivery_id
    # Without a delivery id the body hash is the dedupe key.
    plain = {"X-Hub-Signature-256": sign(b"same", webhook)}
    assert not deliver(sessions, webhook, b"same", **plain).duplicate
    assert deliver(sessions, webhook, b"same", **plain).duplicate


def test_an_old_timestamp_is_not_replayed(sessions, webhook):
    body = b"{}"
    stale = str(int((NOW - timedelta(seconds=301)).timestamp()))
    fresh = str(int((NOW - timedelta(seconds=30)).timestamp()))
    signature = sign(body, webhook)
    with pytest.raises(DeliveryRejected, match="more than 300 s old") as rejected:
        deliver(sessions, webhook, body, **{"X-Hub-Signature-256": signature, "X-Webhook-Timestamp": stale})
    assert rejected.value.status == 401
    deliver(sessions, webhook, body, **{"X-Hub-Signature-256": signature, "X-Webhook-Timestamp": fresh})


def test_a_body_over_one_mib_is_413(sessions, webhook):
    body = b"x" * (1024 * 1024 + 1)
    with pytest.raises(DeliveryRejected) as rejected:
        deliver(sessions, webhook, body, **{"X-Hub-Signature-256": sign(body, webhook)})
    assert rejected.value.status == 413


def test_a_pipeline_has_one_webhook_trigger(sessions, pipeline, webhook):
    with pytest.raises(InvalidInputError, match="already has a webhook trigger"), transaction(sessions) as session:
        create_webhook_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1])


def test_event_triggers_accept_only_documented_types(sessions, pipeline):
    with transaction(sessions) as session:
        trigger = create_event_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1],
                                       event_type="refresh.requested")
        assert trigger.event_type == EventType.REFRESH_REQUESTED
    with pytest.raises(InvalidInputError, match="unknown event type 'page.updated'; use one of"), \
            transaction(sessions) as session:
        create_event_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1], event_type="page.updated")
    with pytest.raises(InvalidInputError, match="already has an event trigger for refresh.requested"), \
            transaction(sessions) as session:
        create_event_trigger(session, workspace_id=pipeline[0], pipeline_id=pipeline[1],
                             event_type="refresh.requested")


def test_another_workspaces_pipeline_cannot_be_subscribed(sessions, pipeline):
    with transaction(sessions) as session:
        other = catalog.create_workspace(session, name="other", owner_user_id="v").workspace.id
    with pytest.raises(catalog.NotFoundError), transaction(sessions) as session:
        create_event_trigger(session, workspace_id=other, pipeline_id=pipeline[1], event_type="folder.changed")


def test_emit_event_validates_type_workspace_and_ids(sessions, pipeline):
    with transaction(sessions) as session:
        event = emit_event(session, workspace_id=pipeline[0], event_type="document.uploaded", payload={"name": "a.pdf"})
        assert trigger_payload(session, {"event_id": str(event.id)}) == {"name": "a.pdf"}
    with pytest.raises(InvalidInputError, match="unknown event type"), transaction(sessions) as session:
        emit_event(session, workspace_id=pipeline[0], event_type="nope")
    with pytest.raises(InvalidInputError, match="payload.connector_id"), transaction(sessions) as session:
        emit_event(session, workspace_id=pipeline[0], event_type="connector.urls_changed", payload={"connector_id": "7"})
    with pytest.raises(catalog.NotFoundError), transaction(sessions) as session:
        emit_event(session, workspace_id=10**9, event_type="refresh.requested")
