"""Webhook triggers and signed bodies for tests: the one place that knows how a delivery is signed."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from pipelines_dagster.core.triggers import accept_delivery, create_webhook_trigger, sign


@dataclass(frozen=True)
class Webhook:
    token: str

    @property
    def path(self) -> str:
        return f"/webhooks/{self.token}"

    def headers(self, body: bytes) -> dict[str, str]:
        """The headers a sender puts on `body` for this trigger to accept it."""
        return {"X-Hub-Signature-256": sign(body, self.token)}


def create_webhook(session: Session, *, workspace_id: int, pipeline_id: int) -> Webhook:
    return Webhook(create_webhook_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id).token)


def deliver(session: Session, hook: Webhook, body: bytes, **headers: str) -> int:
    """Store a signed delivery of `body` in the session's transaction: its id."""
    return accept_delivery(session, token=hook.token, body=body, headers={**hook.headers(body), **headers}).delivery_id
