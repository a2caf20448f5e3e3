"""Webhook intake: a delivery to /webhooks/{token} verified, then stored once for the webhook sensor.

A webhook trigger's deliveries are signed in one of two modes, chosen when the trigger is created:

- `standard` (Standard Webhooks): `webhook-id`, `webhook-timestamp` and `webhook-signature:
  v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` under a per-trigger `whsec_` secret that is
  not in the URL. The id and the time are signed, so a delivery cannot be replayed under another
  id or later than five minutes; the id is the dedupe key. Secrets rotate with an overlap window.
- `github`: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>` under the URL token, as
  GitHub sends. Only the body is signed, so the body is the dedupe key: a body the trigger has
  ever accepted is a replay, whatever unsigned headers say. Its digest outlives the delivery that
  retention prunes and goes with the trigger, so the guard lasts as long as the token that signs.

Deliveries are rows that the webhook sensor takes (`core.triggers.queue`) and turns into runs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import dialect_insert
from pipelines_dagster.app_db.models import (
    PipelineTrigger,
    TriggerKind,
    WebhookBodyDigest,
    WebhookDelivery,
    WebhookSigning,
)
from pipelines_dagster.core.security.signing import live_secrets
from pipelines_dagster.core.security.signing import sign as sign_standard
from pipelines_dagster.core.security.tokens import hash_token

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
