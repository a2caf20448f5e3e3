"""Cron and interval schedules: validation and next fire times, in the schedule's timezone.

`ScheduleSpec` is the one next-fire computation: new triggers, edited ones, restored ones and
the scheduler's tick all go through `ScheduleSpec.next_fire_after`.

croniter is imported by the functions that use it: run processes load this module with the
code location and never evaluate a cron; sensors and the CLI/API do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
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
            f"invalid cron expression {cron!r}; use five fields: minute hour day month weekday, e.g. '0 6 * * 1-5'",
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


class ScheduleColumns(Protocol):
    """A schedule as stored: the columns of a schedule trigger row."""

    cron: str | None
    timezone: str | None
    interval_minutes: int | None


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """Either a cron expression with its timezone, or a fixed interval."""

    cron: str | None = None
    timezone: str | None = None
    every_minutes: int | None = None

    @classmethod
    def of(cls, row: ScheduleColumns) -> ScheduleSpec:
        return cls(cron=row.cron, timezone=row.timezone, every_minutes=row.interval_minutes)

    def validated(self) -> ScheduleSpec:
        if self.cron is not None and self.every_minutes is not None:
            raise InvalidInputError("cron", "give either a cron expression or an interval, not both")
        if self.cron is not None:
            if self.timezone is None:
                raise InvalidInputError("timezone", "a cron schedule needs a timezone, e.g. UTC or Europe/Stockholm")
            validate_timezone(self.timezone)
            return ScheduleSpec(cron=validate_cron(self.cron), timezone=self.timezone)
        if self.timezone is not None:
            raise InvalidInputError("timezone", "a timezone only goes with a cron expression")
        if self.every_minutes is not None:
            return ScheduleSpec(every_minutes=validate_interval(self.every_minutes))
        raise InvalidInputError("cron", "give a cron expression with a timezone, or an interval")

    def describe(self) -> str:
        """The schedule in words: cron '0 6 * * 1-5' UTC, or every 60 min."""
        return f"cron {self.cron!r} {self.timezone}" if self.cron is not None else f"every {self.every_minutes} min"

    def next_fire_after(self, moment: datetime) -> datetime:
        if self.cron is not None and self.timezone is not None:
            return next_cron_fire(self.cron, self.timezone, after=moment)
        assert self.every_minutes is not None
        return next_interval_fire(self.every_minutes, after=moment)
