"""Standard Webhooks secrets (https://www.standardwebhooks.com/): making them, rotating them with an
overlap in which the old ones still count, and signing a message with every live one.

Webhook triggers verify what senders sign with them; notification endpoints sign what we send.
Secrets are kept newest first as `[{"secret": "whsec_...", "expires_at": ISO 8601 or None}]`: a
rotated-out secret counts until its `expires_at`. HMAC needs the secret itself, so it is stored,
not hashed.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from standardwebhooks.webhooks import Webhook

from pipelines_dagster.core.errors import InvalidInputError

SIGNING_SECRET_PREFIX = "whsec_"
DEFAULT_ROTATION_OVERLAP_SECONDS = 24 * 3600
MAX_ROTATION_OVERLAP_SECONDS = 7 * 24 * 3600

SecretEntries = list[dict[str, Any]]


def new_signing_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and 32 random bytes in base64."""
    return SIGNING_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def first_secrets(secret: str) -> SecretEntries:
    """The secret entries of something that has just been given its first secret."""
    return [{"secret": secret, "expires_at": None}]


def validate_overlap(seconds: int, *, field: str = "overlap_seconds") -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= MAX_ROTATION_OVERLAP_SECONDS:
        raise InvalidInputError(
            field, f"must be a whole number of seconds from 0 to {MAX_ROTATION_OVERLAP_SECONDS} (7 days)"
        )
    return seconds


def rotate(
    entries: Sequence[Mapping[str, Any]] | None, *, overlap_seconds: int, now: datetime
) -> tuple[str, SecretEntries, datetime]:
    """A new secret, the entries with it first, and when the ones before it stop counting: in
    `overlap_seconds`, or sooner where an earlier rotation set that already."""
    expires_at = now + timedelta(seconds=validate_overlap(overlap_seconds))
    kept = [
        {"secret": entry["secret"], "expires_at": min(_expiry(entry) or expires_at, expires_at).isoformat()}
        for entry in entries or []
        if (_expiry(entry) or expires_at) > now
    ]
    secret = new_signing_secret()
    return secret, [*first_secrets(secret), *kept], expires_at


def live_secrets(entries: Sequence[Mapping[str, Any]] | None, now: datetime) -> list[str]:
    """The secrets that count at `now`: the current one and those still in their overlap."""
    return [entry["secret"] for entry in entries or [] if (expiry := _expiry(entry)) is None or expiry > now]


def previous_secret_expiry(entries: Sequence[Mapping[str, Any]] | None, now: datetime) -> datetime | None:
    """When the last rotated-out secret that still counts stops counting; None when none does."""
    expiries = [expiry for entry in entries or [] if (expiry := _expiry(entry)) and expiry > now]
    return max(expiries, default=None)


def sign(body: bytes, secret: str, *, message_id: str, timestamp: int) -> str:
    """One `webhook-signature` value: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return Webhook(secret).sign(msg_id=message_id, timestamp=moment, data=body.decode())


def signature_header(body: bytes, signing_secrets: Sequence[str], *, message_id: str, timestamp: int) -> str:
    """The `webhook-signature` header under every live secret, space-separated, as the standard
    has it: a receiver that knows either side of a rotation verifies it."""
    return " ".join(sign(body, secret, message_id=message_id, timestamp=timestamp) for secret in signing_secrets)


def _expiry(entry: Mapping[str, Any]) -> datetime | None:
    value = entry.get("expires_at")
    return datetime.fromisoformat(value) if value else None
