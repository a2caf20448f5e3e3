"""Webhook, domain-event and manual triggers: creating them, accepting signed deliveries, emitting events.

A webhook trigger is named by a random token in its URL; only the token's hash is stored.
Its deliveries are signed in one of two modes, chosen when the trigger is created:

- `standard` (Standard Webhooks): `webhook-id`, `webhook-timestamp` and `webhook-signature:
  v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` under a per-trigger `whsec_` secret that is
  not in the URL. The id and the time are signed, so a delivery cannot be replayed under another
  id or later than five minutes; the id is the dedupe key. Secrets rotate with an overlap window.
- `github`: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>` under the URL token, as
  GitHub sends. Only the body is signed, so the body is the dedupe key: a body the trigger has
  ever accepted is a replay, whatever unsigned headers say. Its digest outlives the delivery that
  retention prunes and goes with the trigger, so the guard lasts as long as the token that signs.

Deliveries and events are rows that the trigger sensors take (core/trigger_queue.py) and turn into runs.
"""

from __future__ import annotations

import base64
import binascii
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
from pipelines_dagster.app_db.models import (
    DomainEvent,
    PipelineTrigger,
    TriggerKind,
    WebhookBodyDigest,
    WebhookDelivery,
    WebhookSigning,
)
from pipelines_dagster.core.catalog.pipelines import (
    SystemManagedError,
    get_pipeline,
    get_workspace,
    hash_token,
    manual_trigger,
    refused_as_sequential,
)
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.errors import InvalidInputError, NotFoundError
from pipelines_dagster.core.security.signing import (
    DEFAULT_ROTATION_OVERLAP_SECONDS,
    first_secrets,
    live_secrets,
    new_signing_secret,
    rotate,
    validate_overlap,
)
from pipelines_dagster.core.security.signing import sign as sign_standard
from pipelines_dagster.core.validation import validate_choice, validate_id

WEBHOOK_TOKEN_PREFIX = "whk_"
GITHUB_SIGNATURE_HEADER = "x-hub-signature-256"
GITHUB_TIMESTAMP_HEADER = "x-webhook-timestamp"
STANDARD_ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"
MAX_WEBHOOK_BODY_BYTES = 1024 * 1024
MAX_DELIVERY_AGE_SECONDS = 300
MAX_WEBHOOK_ID_LENGTH = 190
# Headers worth keeping with a delivery; signatures are not stored.
KEPT_HEADERS = (
    "content-type",
    "user-agent",
    STANDARD_ID_HEADER,
    STANDARD_TIMESTAMP_HEADER,
    GITHUB_TIMESTAMP_HEADER,
    "x-github-delivery",
    "x-github-event",
    "x-delivery-id",
)


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
    return validate_choice(EventType, event_type, field=field, what="event type")


@dataclass(frozen=True)
class NewWebhook:
    trigger: PipelineTrigger
    token: str
    """Shown once: the URL is /webhooks/{token}."""
    secret: str
    """Shown once: the signing key, a whsec_ secret in standard mode and the token itself in github mode."""


def create_webhook_trigger(
    session: Session, *, workspace_id: int, pipeline_id: int, signing: str = WebhookSigning.STANDARD.value
) -> NewWebhook:
    mode = validate_choice(WebhookSigning, signing, field="signing", what="signing mode")
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    token = WEBHOOK_TOKEN_PREFIX + secrets.token_urlsafe(32)
    secret = new_signing_secret() if mode is WebhookSigning.STANDARD else token
    trigger = PipelineTrigger(
        workspace_id=workspace_id,
        pipeline_id=pipeline_id,
        kind=TriggerKind.WEBHOOK.value,
        webhook_secret_hash=hash_token(token),
        signing=mode.value,
        signing_secrets=first_secrets(secret) if mode is WebhookSigning.STANDARD else None,
    )
    return NewWebhook(_add_once(session, trigger), token, secret)


@dataclass(frozen=True)
class RotatedSecret:
    trigger: PipelineTrigger
    secret: str
    """Shown once: the new signing secret."""
    previous_expires_at: datetime
    """Until then the previous secrets verify too."""


def rotate_signing_secret(
    session: Session,
    *,
    workspace_id: int,
    pipeline_id: int,
    trigger_id: int,
    overlap_seconds: int = DEFAULT_ROTATION_OVERLAP_SECONDS,
    now: datetime | None = None,
) -> RotatedSecret:
    """Give a standard-mode trigger a new secret; the ones it had verify for `overlap_seconds` more."""
    validate_overlap(overlap_seconds)
    trigger = get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id)
    if trigger.signing != WebhookSigning.STANDARD.value:
        raise InvalidInputError(
            "signing",
            "only a standard-mode webhook trigger has a secret to rotate; a github-mode trigger signs with its "
            "URL token, so replace it with a new trigger",
        )
    secret, trigger.signing_secrets, expires_at = rotate(
        trigger.signing_secrets, overlap_seconds=overlap_seconds, now=now or datetime.now(UTC)
    )
    session.flush()
    return RotatedSecret(trigger, secret, expires_at)


def get_trigger(session: Session, *, workspace_id: int, pipeline_id: int, trigger_id: int) -> PipelineTrigger:
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    trigger = session.get(PipelineTrigger, trigger_id)
    if trigger is None or trigger.pipeline_id != pipeline_id:
        raise NotFoundError(f"trigger {trigger_id} is not a trigger of pipeline {pipeline_id}")
    return trigger


USER_DISABLED_REASON = "switched off by a user"


def pipeline_triggers(session: Session, *, workspace_id: int, pipeline_id: int) -> list[PipelineTrigger]:
    """A pipeline's triggers, oldest first."""
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    return list(
        session.scalars(
            sa.select(PipelineTrigger).where(PipelineTrigger.pipeline_id == pipeline_id).order_by(PipelineTrigger.id)
        )
    )


def set_trigger_enabled(
    session: Session,
    *,
    workspace_id: int,
    pipeline_id: int,
    trigger_id: int,
    enabled: bool,
    now: datetime | None = None,
) -> PipelineTrigger:
    """Switch one trigger on or off; a schedule switched on is due next at its next fire time from now.

    A trigger of a disabled pipeline may be switched on: it fires into nothing until the pipeline is
    enabled (the pipeline is the switch). The connector's own periodic indexing follows the
    de-dup guard, not this.
    """
    trigger = get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id)
    if trigger.pipeline.system_managed:
        raise SystemManagedError(
            f"pipeline {pipeline_id} is a connector's own periodic indexing; its schedule follows the de-dup guard"
        )
    if enabled == trigger.enabled:
        return trigger
    next_fire_at = None
    if enabled and trigger.kind == TriggerKind.SCHEDULE.value:
        spec = ScheduleSpec.of(trigger).validated()
        next_fire_at = spec.next_fire_after(now or datetime.now(UTC))
    trigger.enabled, trigger.next_fire_at = enabled, next_fire_at
    trigger.disabled_reason = None if enabled else USER_DISABLED_REASON
    session.flush()
    return trigger


def create_event_trigger(session: Session, *, workspace_id: int, pipeline_id: int, event_type: str) -> PipelineTrigger:
    """Subscribe a pipeline to an event type; an unknown type is refused here, not silently never fired."""
    kind = validate_event_type(event_type)
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    trigger = PipelineTrigger(
        workspace_id=workspace_id, pipeline_id=pipeline_id, kind=TriggerKind.EVENT.value, event_type=kind.value
    )
    return _add_once(session, trigger)


def create_manual_trigger(session: Session, *, workspace_id: int, pipeline_id: int) -> PipelineTrigger:
    """Give a pipeline its manual trigger, on: what lets it be run by hand (pipelines get one when they
    are made; one whose trigger was deleted, or made before that, gets it back here)."""
    pipeline = get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    return _add_once(session, manual_trigger(pipeline))


def _add_once(session: Session, trigger: PipelineTrigger) -> PipelineTrigger:
    """Add a new trigger, refused when its pipeline has one of its kind (and event type) already: one made
    before, or one a concurrent request made first."""

    def refuse_duplicate() -> None:
        exists = session.scalar(
            sa.select(PipelineTrigger.id).where(
                PipelineTrigger.pipeline_id == trigger.pipeline_id,
                PipelineTrigger.kind == trigger.kind,
                PipelineTrigger.event_type.is_(None)
                if trigger.event_type is None
                else PipelineTrigger.event_type == trigger.event_type,
            )
        )
        if exists:
            what = f"an event trigger for {trigger.event_type}" if trigger.event_type else f"a {trigger.kind} trigger"
            raise InvalidInputError("kind", f"pipeline {trigger.pipeline_id} already has {what}")

    refuse_duplicate()
    with refused_as_sequential(session, refuse_duplicate):
        session.add(trigger)
    return trigger


def sign(body: bytes, secret: str) -> str:
    """The X-Hub-Signature-256 value a github-mode sender puts on `body`."""
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


UNVERIFIED = "unknown webhook, or a missing or invalid signature"


def _signed_at(stamp: str | None, header: str, moment: datetime) -> None:
    """Refuse a delivery whose timestamp is more than MAX_DELIVERY_AGE_SECONDS from `moment`."""
    try:
        sent = datetime.fromtimestamp(int(stamp or ""), UTC)
    except (ValueError, OverflowError, OSError):
        raise DeliveryRejected(401, f"{header} must be Unix seconds") from None
    if abs((moment - sent).total_seconds()) > MAX_DELIVERY_AGE_SECONDS:
        raise DeliveryRejected(
            401, f"{header} is more than {MAX_DELIVERY_AGE_SECONDS} s from the server's clock; not accepted"
        )


def verify_standard(trigger: PipelineTrigger, body: bytes, headers: Mapping[str, str], moment: datetime) -> str:
    """Check a standard-mode delivery's signature and time; its dedupe key (from webhook-id)."""
    webhook_id, stamp = headers.get(STANDARD_ID_HEADER), headers.get(STANDARD_TIMESTAMP_HEADER)
    offered = headers.get(STANDARD_SIGNATURE_HEADER)
    if not (webhook_id and stamp and offered):
        raise DeliveryRejected(
            401, f"{UNVERIFIED}: send {STANDARD_ID_HEADER}, {STANDARD_TIMESTAMP_HEADER} and {STANDARD_SIGNATURE_HEADER}"
        )
    if len(webhook_id) > MAX_WEBHOOK_ID_LENGTH:
        raise DeliveryRejected(400, f"{STANDARD_ID_HEADER} is longer than {MAX_WEBHOOK_ID_LENGTH} characters")
    _signed_at(stamp, STANDARD_TIMESTAMP_HEADER, moment)
    try:
        body.decode()
    except UnicodeDecodeError:
        raise DeliveryRejected(400, "a standard-mode webhook body must be UTF-8 text") from None
    signatures = []
    for entry in offered.split():
        version, _, value = entry.partition(",")
        if version == "v1":
            try:
                signatures.append(base64.b64decode(value, validate=True))
            except binascii.Error:
                continue
    for secret in live_secrets(trigger.signing_secrets, moment):
        expected = base64.b64decode(sign_standard(body, secret, message_id=webhook_id, timestamp=int(stamp))[3:])
        if any(hmac.compare_digest(expected, candidate) for candidate in signatures):
            return f"id:{webhook_id}"
    raise DeliveryRejected(401, f"{UNVERIFIED} ({STANDARD_SIGNATURE_HEADER}: v1,<base64 HMAC-SHA256>)")


def verify_github(token: str, body: bytes, headers: Mapping[str, str], moment: datetime) -> str:
    """Check a github-mode delivery's signature; its dedupe key, the body's hash (nothing else is signed)."""
    if not signature_valid(body, token, headers.get(GITHUB_SIGNATURE_HEADER)):
        raise DeliveryRejected(401, f"{UNVERIFIED} (X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>)")
    # Unsigned, so it only stops a stale resend by an honest proxy; replays are stopped by the body.
    if GITHUB_TIMESTAMP_HEADER in headers:
        _signed_at(headers[GITHUB_TIMESTAMP_HEADER], "X-Webhook-Timestamp", moment)
    return "sha256:" + hashlib.sha256(body).hexdigest()


def accept_delivery(
    session: Session,
    *,
    token: str,
    body: bytes,
    headers: Mapping[str, str],
    now: datetime | None = None,
) -> DeliveryAccepted:
    """Verify and store one webhook delivery; DeliveryRejected says why and nothing is stored.

    A delivery already accepted (the same webhook-id in standard mode, the same body in github
    mode, even once retention has pruned it) is a duplicate: answered as accepted with the first
    delivery's id, stored once, and it starts no second run.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    if len(body) > MAX_WEBHOOK_BODY_BYTES:
        raise DeliveryRejected(413, f"the body is larger than {MAX_WEBHOOK_BODY_BYTES} bytes")
    moment = now or datetime.now(UTC)
    trigger = session.scalar(
        sa.select(PipelineTrigger).where(
            PipelineTrigger.webhook_secret_hash == hash_token(token),
            PipelineTrigger.kind == TriggerKind.WEBHOOK.value,
        )
    )
    # An unknown token gets the same answer as a bad signature.
    if trigger is None:
        raise DeliveryRejected(401, UNVERIFIED)
    if trigger.signing == WebhookSigning.STANDARD.value:
        dedupe_key = verify_standard(trigger, body, lowered, moment)
    else:
        dedupe_key = verify_github(token, body, lowered, moment)
    if not trigger.enabled:
        raise DeliveryRejected(409, "this webhook trigger is disabled")
    github = trigger.signing == WebhookSigning.GITHUB.value
    if github:
        earlier = _claim_body(session, trigger_id=trigger.id, dedupe_key=dedupe_key, moment=moment)
        if earlier is not None:
            return DeliveryAccepted(earlier, duplicate=True)
    accepted = _store_delivery(session, trigger, dedupe_key=dedupe_key, body=body, headers=lowered, moment=moment)
    if github:
        session.execute(
            sa.update(WebhookBodyDigest)
            .where(WebhookBodyDigest.trigger_id == trigger.id, WebhookBodyDigest.dedupe_key == dedupe_key)
            .values(delivery_id=accepted.delivery_id)
        )
    return accepted


def _claim_body(session: Session, *, trigger_id: int, dedupe_key: str, moment: datetime) -> int | None:
    """Record that a github-mode trigger accepted this body: None when it is new, else the id of the
    delivery that brought it first (pruned or not).

    The primary key decides between identical deliveries at once, never a read before the write: the
    second waits for the first's transaction (PostgreSQL's unique index, SQLite's writer lock) and
    finds its row, with the delivery id it set.
    """
    claimed = session.scalar(
        dialect_insert(session, WebhookBodyDigest)
        .values(trigger_id=trigger_id, dedupe_key=dedupe_key, accepted_at=moment)
        .on_conflict_do_nothing(index_elements=["trigger_id", "dedupe_key"])
        .returning(WebhookBodyDigest.trigger_id)
    )
    if claimed is not None:
        return None
    earlier = session.execute(
        sa.select(WebhookBodyDigest.delivery_id).where(
            WebhookBodyDigest.trigger_id == trigger_id, WebhookBodyDigest.dedupe_key == dedupe_key
        )
    ).scalar_one()
    # NULL only inside the transaction that claimed the row, which no other one sees.
    if earlier is None:
        raise RuntimeError(f"the digest {dedupe_key} of trigger {trigger_id} names no delivery")
    return earlier


def _store_delivery(
    session: Session,
    trigger: PipelineTrigger,
    *,
    dedupe_key: str,
    body: bytes,
    headers: Mapping[str, str],
    moment: datetime,
) -> DeliveryAccepted:
    inserted = session.scalar(
        dialect_insert(session, WebhookDelivery)
        .values(
            workspace_id=trigger.workspace_id,
            trigger_id=trigger.id,
            dedupe_key=dedupe_key,
            payload=body,
            headers={name: headers[name] for name in KEPT_HEADERS if name in headers},
            received_at=moment,
        )
        .on_conflict_do_nothing(index_elements=["trigger_id", "dedupe_key"])
        .returning(WebhookDelivery.id)
    )
    if inserted is not None:
        return DeliveryAccepted(inserted, duplicate=False)
    # The insert conflicted, so the earlier delivery's row is there.
    earlier = session.execute(
        sa.select(WebhookDelivery.id).where(
            WebhookDelivery.trigger_id == trigger.id, WebhookDelivery.dedupe_key == dedupe_key
        )
    ).scalar_one()
    return DeliveryAccepted(earlier, duplicate=True)


def emit_event(
    session: Session, *, workspace_id: int, event_type: str, payload: Mapping[str, Any] | None = None
) -> DomainEvent:
    """Record a domain event; subscribed pipelines of the workspace run on the event sensor's next tick."""
    kind = validate_event_type(event_type)
    get_workspace(session, workspace_id)
    body = dict(payload or {})
    for key in ("connector_id", "pipeline_id"):
        if key in body:
            validate_id(body[key], field=f"payload.{key}")
    event = DomainEvent(workspace_id=workspace_id, event_type=kind.value, payload=body)
    session.add(event)
    session.flush()
    return event


def delivery_payload(session: Session, delivery_id: int) -> bytes:
    payload = session.scalar(sa.select(WebhookDelivery.payload).where(WebhookDelivery.id == delivery_id))
    if payload is None:
        raise NotFoundError(f"webhook delivery {delivery_id} does not exist")
    return payload


def trigger_payload(session: Session, *, delivery_id: int | None = None, event_id: int | None = None) -> Any:
    """The payload of the webhook delivery or event that started a run, else None.

    JSON bodies come back parsed; anything else as text, so a run can see what fired it.
    """
    if delivery_id is not None:
        body = delivery_payload(session, delivery_id)
        try:
            return json.loads(body)
        except ValueError:
            return body.decode("utf-8", errors="replace")
    if event_id is not None:
        return session.scalar(sa.select(DomainEvent.payload).where(DomainEvent.id == event_id))
    return None
