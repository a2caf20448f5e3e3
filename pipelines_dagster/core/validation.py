"""Validation of what users type (URLs, names, ids, times), with errors that say what to fix, shared by the
CLI, the HTTP API and the chat tools."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Annotated, TypeGuard, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from pipelines_dagster.core.errors import InvalidInputError

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")

MAX_URL_LENGTH = 2048
# The largest integer every JSON client reads exactly; row ids stay far below it, and
# anything above would overflow the 64-bit id columns before reaching a query.
MAX_ID = 2**53 - 1
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
"""A row id a request names (an API body, a tool argument)."""


def field_rule(validator: Callable[[T], T], *, before: bool = False) -> AfterValidator | BeforeValidator:
    """Run a validator of this module inside pydantic (API bodies, tool arguments), after its type's own check
    or `before` it, so its message lands on the field like any other."""

    def run(value: T) -> T:
        try:
            return validator(value)
        except InvalidInputError as exc:
            raise PydanticCustomError("invalid_input", "{message}", {"message": exc.message}) from None

    return BeforeValidator(run) if before else AfterValidator(run)


def whole_number_in(value: object, low: int, high: int) -> TypeGuard[int]:
    """Whether `value` is an integer from `low` to `high`; true and false are none (Python counts them as 1 and 0)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def validate_id(value: object, *, field: str) -> int:
    """A row id as a client gives it: a whole number from 1 to MAX_ID, never true or false."""
    if not whole_number_in(value, 1, MAX_ID):
        raise InvalidInputError(field, f"must be an integer id from 1 to {MAX_ID}, got {value!r}")
    return value


def iso_8601_text(value: object) -> object:
    """A time as given: ISO 8601 text (or a datetime already), else refused."""
    # Pydantic would also read a number, or text of one, as a Unix time; the documented format is ISO 8601 only.
    if not isinstance(value, datetime) and not (isinstance(value, str) and re.match(r"\d{4}-", value)):
        raise InvalidInputError("time", "must be an ISO 8601 time such as 2026-12-01T09:00:00Z")
    return value


def in_utc(moment: datetime, *, field: str = "time") -> datetime:
    """`moment` in UTC, a naive one read as UTC; refused when UTC cannot hold it, so no query is sent with it."""
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        raise InvalidInputError(
            field, "is out of range once converted to UTC; give a time between years 1 and 9999"
        ) from None


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
    if not whole_number_in(seconds, MIN_RUNTIME_SECONDS, MAX_RUNTIME_SECONDS):
        raise InvalidInputError(
            field,
            f"must be a whole number of seconds from {MIN_RUNTIME_SECONDS} to {MAX_RUNTIME_SECONDS} (a week), "
            f"got {seconds!r}; leave it out (or null) for the deployment's maximum runtime",
        )
    return seconds


MAX_QUEUE_NAME_LENGTH = 64
# Conservative: what RabbitMQ and Redis take as a queue name and Celery's `--queues` reads as one name (no commas,
# no blanks), whatever the broker.
QUEUE_NAME_PATTERN = rf"[A-Za-z0-9._-]{{1,{MAX_QUEUE_NAME_LENGTH}}}"
QUEUE_NAME = re.compile(QUEUE_NAME_PATTERN)
# RabbitMQ keeps the queue names starting so for itself.
RESERVED_QUEUE_PREFIX = "amq."


def validate_queue_name(name: object, *, field: str = "worker_queue") -> str:
    """A Celery queue's name that runs can be sent to and a worker can take (`pipelines-dagster worker --queue`)."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidInputError(
            field,
            f"{name!r} is not a queue name: give one name of 1 to {MAX_QUEUE_NAME_LENGTH} letters, digits, '.', "
            "'_' or '-' (no spaces, without commas)",
        )
    if name.startswith(RESERVED_QUEUE_PREFIX):
        raise InvalidInputError(
            field, f"{name!r}: names starting with {RESERVED_QUEUE_PREFIX!r} are RabbitMQ's own; choose another"
        )
    return name
