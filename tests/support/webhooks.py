"""Signing webhook deliveries as a sender does, written out from the specs rather than with the code under test."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime


def standard_headers(secret: str, body: bytes, *, webhook_id: str = "msg_1", at: datetime) -> dict[str, str]:
    """The headers of a delivery signed at `at` as the Standard Webhooks spec says."""
    timestamp = str(int(at.timestamp()))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": webhook_id, "webhook-timestamp": timestamp,
            "webhook-signature": "v1," + base64.b64encode(mac).decode()}
