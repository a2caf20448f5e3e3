"""API tokens: made at random, stored only as their hash."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "pdk_"


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(prefix: str) -> str:
    """A token of 256 random bits, behind a prefix that says what it is for."""
    return prefix + secrets.token_urlsafe(32)
