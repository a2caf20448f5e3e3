"""Validation of what users type: URLs and names, with errors that say what to fix."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TypeVar
from urllib.parse import urlsplit

E = TypeVar("E", bound=enum.Enum)

MAX_URL_LENGTH = 2048


class InvalidInputError(ValueError):
    """Bad input from a user; `field` names what to fix (a CLI option or an API field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def validate_choice(choices: type[E], value: object, *, field: str, what: str) -> E:
    """`value` as a member of `choices`; else an error that lists them."""
    try:
        return choices(value)
    except ValueError:
        known = ", ".join(str(member.value) for member in choices)
        raise InvalidInputError(field, f"unknown {what} {value!r}; use one of {known}") from None


def validate_url(url: str, *, field: str = "url") -> str:
    """An absolute http(s) URL with a host, returned stripped of surrounding blanks."""
    candidate = url.strip()
    if not candidate:
        raise InvalidInputError(field, "a URL is empty")
    if len(candidate) > MAX_URL_LENGTH:
        raise InvalidInputError(field, f"URL longer than {MAX_URL_LENGTH} characters: {candidate[:60]}...")
    if any(ch.isspace() or ord(ch) < 32 for ch in candidate):
        raise InvalidInputError(field, f"URL contains spaces or control characters: {candidate!r}")
    try:
        parts = urlsplit(candidate)
        port = parts.port
    except ValueError as exc:
        raise InvalidInputError(field, f"malformed URL {candidate!r} ({exc})") from None
    if parts.scheme not in {"http", "https"}:
        raise InvalidInputError(field, f"malformed URL {candidate!r}: it must start with http:// or https://")
    if not parts.hostname:
        raise InvalidInputError(field, f"malformed URL {candidate!r}: it has no host name")
    if port == 0:
        raise InvalidInputError(field, f"malformed URL {candidate!r}: port 0 is not valid")
    if parts.username is not None or parts.password is not None:
        raise InvalidInputError(field, f"URL {candidate!r} carries credentials; remove the user:password@ part")
    return candidate


def validate_urls(urls: Iterable[str], *, field: str = "urls") -> list[str]:
    """Valid, de-duplicated URLs in their given order; at least one."""
    seen: dict[str, None] = {}
    for url in urls:
        seen.setdefault(validate_url(url, field=field))
    if not seen:
        raise InvalidInputError(field, "give at least one URL")
    return list(seen)


def validate_name(name: str, *, field: str = "name", max_length: int = 200) -> str:
    cleaned = name.strip()
    if not cleaned:
        raise InvalidInputError(field, "must not be empty")
    if len(cleaned) > max_length:
        raise InvalidInputError(field, f"must be at most {max_length} characters")
    if any(ord(ch) < 32 for ch in cleaned):
        raise InvalidInputError(field, "must not contain control characters")
    return cleaned


# A run's own maximum runtime: from 10 s (tests, and a pipeline that must never hold its slot long)
# to a week. A crawl longer than its limit is continued by another run from what it stored.
MIN_RUNTIME_SECONDS = 10
MAX_RUNTIME_SECONDS = 7 * 24 * 3600


def validate_max_runtime(seconds: object, *, field: str = "max_runtime_seconds") -> int:
    """A whole number of seconds a run may take, within MIN_RUNTIME_SECONDS..MAX_RUNTIME_SECONDS."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int)
        or not (MIN_RUNTIME_SECONDS <= seconds <= MAX_RUNTIME_SECONDS)
    ):
        raise InvalidInputError(
            field,
            f"must be a whole number of seconds from {MIN_RUNTIME_SECONDS} to {MAX_RUNTIME_SECONDS} (a week), "
            f"got {seconds!r}; leave it out (or null) for the deployment's maximum runtime",
        )
    return seconds
