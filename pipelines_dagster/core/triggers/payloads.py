"""What fired a run, as the run sees it: the payload of its webhook delivery or domain event, and that
payload as the run's metadata shows it (whole when small, else its size, digest and keys, so a large
webhook body or event payload is not copied into every run it fires)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import DomainEvent, WebhookDelivery
from pipelines_dagster.core.errors import NotFoundError

# Larger payloads are summarized: the Dagster event log holds metadata with every run it fires.
MAX_SHOWN_PAYLOAD_BYTES = 16 * 1024
MAX_SHOWN_KEYS = 100


def shown_payload(payload: Any) -> Any:
    """`payload` (parsed JSON, or text) when its encoding is at most MAX_SHOWN_PAYLOAD_BYTES, else a summary:
    its size in bytes, the sha256 of that encoding (UTF-8 text, or compact JSON), and for an object its
    first MAX_SHOWN_KEYS top-level keys (a list, its length)."""
    if isinstance(payload, str):
        encoded = payload.encode()
    else:
        encoded = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    if len(encoded) <= MAX_SHOWN_PAYLOAD_BYTES:
        return payload
    summary: dict[str, Any] = {
        "summarized": f"the payload is over {MAX_SHOWN_PAYLOAD_BYTES} bytes, so only its summary is kept here",
        "bytes": len(encoded),
        "sha256": hashlib.sha256(encoded).hexdigest(),
    }
    if isinstance(payload, dict):
        summary["key_count"] = len(payload)
        summary["top_level_keys"] = list(payload)[:MAX_SHOWN_KEYS]
    elif isinstance(payload, list):
        summary["items"] = len(payload)
    return summary


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
