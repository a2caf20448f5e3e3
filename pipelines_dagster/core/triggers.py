"""Webhook and domain-event triggers: creating them, accepting signed deliveries, emitting events.

A webhook trigger's token names it in the URL and is its HMAC secret; only the
token's hash is stored. Deliveries and events are rows that sensors turn into
runs, each with its own cursor.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import dialect_insert
from pipelines_dagster.app_db.models import DomainEvent, PipelineTrigger, TriggerKind, WebhookDelivery
from pipelines_dagster.core.catalog import NotFoundError, get_pipeline, get_workspace, hash_token
from pipelines_dagster.core.validation import InvalidInputError

WEBHOOK_TOKEN_PREFIX = "whk_"
SIGNATURE_HEADER = "x-hub-signature-256"
TIMESTAMP_HEADER = "x-webhook-timestamp"
DELIVERY_HEADERS = ("x-delivery-id", "x-github-delivery", "x-request-id")
MAX_WEBHOOK_BODY_BYTES = 1024 * 1024
MAX_DELIVERY_AGE_SECONDS = 300
# Headers worth keeping with a delivery; the signature is not stored.
KEPT_HEADERS = ("content-type", "user-agent", TIMESTAMP_HEADER, *DELIVERY_HEADERS)


class EventType(enum.StrEnum):
    """The domain events a trigger can subscribe to; an event may name the connector or pipeline it concerns."""

    CONNECTOR_URLS_CHANGED = "connector.urls_changed"
    """A connector's URL list was edited: re-crawl what it feeds."""
    DOCUMENT_UPLOADED = "document.uploaded"
    """A document was uploaded into the workspace's KB."""
    FOLDER_CHANGED = "folder.changed"
    """A KB folder was created, renamed or moved."""
    REFRESH_REQUESTED = "refresh.requested"
    """Someone asked for fresh content (a chat answer found it stale, an operator clicked refresh)."""


def validate_event_type(event_type: str, *, field: str = "event_type") -> EventType:
    try:
        return EventType(event_type)
    except ValueError:
        known = ", ".join(member.value for member in EventType)
        raise InvalidInputError(field, f"unknown event type {event_type!r}; use one of {known}") from None


@dataclass(frozen=True)
class NewWebhook:
    trigger: PipelineTrigger
    token: str
    """Shown once: the URL is /webhooks/{token}, and the token is the signing secret."""


def create_webhook_trigger(session: Session, *, workspace_id: int, pipeline_id: int) -> NewWebhook:
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    _refuse_duplicate(session, pipeline_id, TriggerKind.WEBHOOK, None)
    token = WEBHOOK_TOKEN_PREFIX + secrets.token_urlsafe(32)
    trigger = PipelineTrigger(
        workspace_id=workspace_id,
        pipeline_id=pipeline_id,
        kind=TriggerKind.WEBHOOK.value,
        webhook_secret_hash=hash_token(token),
    )
    session.add(trigger)
    session.flush()
    return NewWebhook(trigger, token)


def create_event_trigger(
    session: Session, *, workspace_id: int, pipeline_id: int, event_type: str
) -> PipelineTrigger:
    """Subscribe a pipeline to an event type; an unknown type is refused here, not silently never fired."""
    kind = validate_event_type(event_type)
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    _refuse_duplicate(session, pipeline_id, TriggerKind.EVENT, kind.value)
    trigger = PipelineTrigger(
        workspace_id=workspace_id, pipeline_id=pipeline_id, kind=TriggerKind.EVENT.value, event_type=kind.value
    )
    session.add(trigger)
    session.flush()
    return trigger


def _refuse_duplicate(session: Session, pipeline_id: int, kind: TriggerKind, event_type: str | None) -> None:
    exists = session.scalar(
        sa.select(PipelineTrigger.id).where(
            PipelineTrigger.pipeline_id == pipeline_id,
            PipelineTrigger.kind == kind.value,
            PipelineTrigger.event_type.is_(None) if event_type is None else PipelineTrigger.event_type == event_type,
        )
    )
    if exists:
        what = "an event trigger for " + event_type if event_type else f"a {kind.value} trigger"
        raise InvalidInputError("kind", f"pipeline {pipeline_id} already has {what}")


def sign(body: bytes, secret: str) -> str:
    """The X-Hub-Signature-256 value a sender puts on `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_valid(body: bytes, secret: str, header: str | None) -> bool:
    return header is not None and hmac.compare_digest(sign(body, secret), header.strip())


class DeliveryRejected(Exception):
    """A delivery we refuse; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class DeliveryAccepted:
    delivery_id: int
    duplicate: bool
    """True for a redelivery: accepted, stored once, starts no second run."""


def accept_delivery(
    session: Session,
    *,
    token: str,
    body: bytes,
    headers: Mapping[str, str],
    now: datetime | None = None,
) -> DeliveryAccepted:
    """Verify and store one webhook delivery; DeliveryRejected says why and nothing is stored."""
    lowered = {name.lower(): value for name, value in headers.items()}
    if len(body) > MAX_WEBHOOK_BODY_BYTES:
        raise DeliveryRejected(413, f"the body is larger than {MAX_WEBHOOK_BODY_BYTES} bytes")
    trigger = session.scalar(
        sa.select(PipelineTrigger).where(
            PipelineTrigger.webhook_secret_hash == hash_token(token),
            PipelineTrigger.kind == TriggerKind.WEBHOOK.value,
        )
    )
    # The token is the secret: an unknown one gets the same answer as a bad signature.
    if trigger is None or not signature_valid(body, token, lowered.get(SIGNATURE_HEADER)):
        raise DeliveryRejected(401, "missing or invalid X-Hub-Signature-256 (sha256=HMAC of the body)")
    moment = now or datetime.now(UTC)
    if (stamp := lowered.get(TIMESTAMP_HEADER)) is not None:
        try:
            sent = datetime.fromtimestamp(int(stamp), UTC)
        except (ValueError, OverflowError, OSError):
            raise DeliveryRejected(400, f"{TIMESTAMP_HEADER} must be Unix seconds") from None
        if abs((moment - sent).total_seconds()) > MAX_DELIVERY_AGE_SECONDS:
            raise DeliveryRejected(401, f"the delivery is more than {MAX_DELIVERY_AGE_SECONDS} s old; not replayed")
    if not trigger.enabled:
        raise DeliveryRejected(409, "this webhook trigger is disabled")
    dedupe_key = next(
        (lowered[name] for name in DELIVERY_HEADERS if lowered.get(name)), "sha256:" + hashlib.sha256(body).hexdigest()
    )[:200]
    inserted = session.scalar(
        dialect_insert(session, WebhookDelivery)
        .values(
            workspace_id=trigger.workspace_id,
            trigger_id=trigger.id,
            dedupe_key=dedupe_key,
            payload=body,
            headers={name: lowered[name] for name in KEPT_HEADERS if name in lowered},
            received_at=moment,
        )
        .on_conflict_do_nothing(index_elements=["trigger_id", "dedupe_key"])
        .returning(WebhookDelivery.id)
    )
    if inserted is not None:
        return DeliveryAccepted(inserted, duplicate=False)
    earlier = session.scalar(
        sa.select(WebhookDelivery.id).where(
            WebhookDelivery.trigger_id == trigger.id, WebhookDelivery.dedupe_key == dedupe_key
        )
    )
    return DeliveryAccepted(earlier, duplicate=True)


def emit_event(
    session: Session, *, workspace_id: int, event_type: str, payload: Mapping[str, Any] | None = None
) -> DomainEvent:
    """Record a domain event; subscribed pipelines of the workspace run on the event sensor's next tick."""
    kind = validate_event_type(event_type)
    get_workspace(session, workspace_id)
    body = dict(payload or {})
    for key in ("connector_id", "pipeline_id"):
        if key in body and not isinstance(body[key], int):
            raise InvalidInputError(f"payload.{key}", "must be an integer id")
    event = DomainEvent(workspace_id=workspace_id, event_type=kind.value, payload=body)
    session.add(event)
    session.flush()
    return event


def delivery_payload(session: Session, delivery_id: int) -> bytes:
    payload = session.scalar(sa.select(WebhookDelivery.payload).where(WebhookDelivery.id == delivery_id))
    if payload is None:
        raise NotFoundError(f"webhook delivery {delivery_id} does not exist")
    return payload


def trigger_payload(session: Session, tags: Mapping[str, str]) -> Any:
    """The payload of the webhook delivery or event that started a run (from its tags), else None.

    JSON bodies come back parsed; anything else as text, so a run can see what fired it.
    """
    if delivery_id := tags.get("webhook_delivery_id"):
        body = delivery_payload(session, int(delivery_id))
        try:
            return json.loads(body)
        except ValueError:
            return body.decode("utf-8", errors="replace")
    if event_id := tags.get("event_id"):
        return session.scalar(sa.select(DomainEvent.payload).where(DomainEvent.id == int(event_id)))
    return None
