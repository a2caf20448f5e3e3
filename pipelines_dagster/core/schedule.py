"""Cron and interval schedules: validation and next fire times, in the schedule's timezone.

croniter is imported by the functions that use it: run processes load this module with the
code location and never evaluate a cron; sensors and the CLI/API do.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipelines_dagster.core.validation import InvalidInputError


def validate_timezone(timezone: str, *, field: str = "timezone") -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInputError(
            field, f"unknown timezone {timezone!r}; use an IANA name such as UTC or Europe/Stockholm"
        ) from None


def validate_cron(cron: str, *, field: str = "cron") -> str:
    from croniter import croniter

    expression = " ".join(cron.split())
    if len(expression.split(" ")) != 5 or not croniter.is_valid(expression):
        raise InvalidInputError(
            field,
            f"invalid cron expression {cron!r}; use five fields: minute hour day month weekday, "
            "e.g. '0 6 * * 1-5'",
        )
    return expression


def next_cron_fire(cron: str, timezone: str, *, after: datetime) -> datetime:
    """The first match strictly after `after`, evaluated in `timezone` (DST-correct), in UTC."""
    from croniter import croniter

    local_after = after.astimezone(ZoneInfo(timezone))
    return croniter(cron, local_after).get_next(datetime).astimezone(UTC)


def next_interval_fire(every_minutes: int, *, after: datetime) -> datetime:
    return (after + timedelta(minutes=every_minutes)).astimezone(UTC)


def validate_interval(every_minutes: int, *, field: str = "every_minutes") -> int:
    if every_minutes < 1:
        raise InvalidInputError(field, "must be a whole number of minutes, 1 or more")
    return every_minutes
