"""Webhook triggers and signed deliveries for tests, signed as a sender does from the specs rather than
with the code under test: the one place that knows how a delivery is signed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from pipelines_dagster.core.catalog.triggers import create_webhook_trigger
from pipelines_dagster.core.triggers.webhooks import accept_delivery


def standard_headers(secret: str, body: bytes, *, webhook_id: str = "msg_1", at: datetime) -> dict[str, str]:
    """The headers of a delivery signed at `at` as the Standard Webhooks spec says."""
    timestamp = str(int(at.timestamp()))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": "v1," + base64.b64encode(mac).decode(),
    }


@dataclass(frozen=True)
class Webhook:
    """A standard-mode webhook trigger: its URL token and signing secret."""

    token: str
    secret: str

    @property
    def path(self) -> str:
        return f"/webhooks/{self.token}"

    def headers(self, body: bytes, delivery_id: str | None = None) -> dict[str, str]:
        """The headers a sender puts on `body` now; a new delivery id unless one is given (a resend)."""
        return standard_headers(
            self.secret, body, webhook_id=delivery_id or f"msg_{uuid.uuid4().hex}", at=datetime.now(UTC)
        )


def create_webhook(session: Session, *, workspace_id: int, pipeline_id: int) -> Webhook:
    made = create_webhook_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    return Webhook(made.token, made.secret)


def deliver(session: Session, hook: Webhook, body: bytes, delivery_id: str | None = None) -> int:
    """Store a signed delivery of `body` in the session's transaction: its id."""
    return accept_delivery(session, token=hook.token, body=body, headers=hook.headers(body, delivery_id)).delivery_id
