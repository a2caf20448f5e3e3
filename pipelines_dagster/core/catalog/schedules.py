"""Cron and interval schedules: validation and next fire times, in the schedule's timezone.

`ScheduleSpec` is the one next-fire computation: new triggers, edited ones, restored ones and
the scheduler's tick all go through `ScheduleSpec.next_fire_after`.

Daylight saving: a cron names wall times, and each wall time it names fires once. A wall time
the clock shows twice (fall-back) fires at its first occurrence; one the clock skips
(spring-forward) fires at the moment of the jump. That holds for every cron, `0 * * * *` and
`*/15 * * * *` too: an hourly cron fires at the first 02:00 of a fall-back night and not at the
second, so that night has one hour without a fire, and no cron fires twice at one instant. An
interval schedule counts real minutes from its due time, so DST does not touch it.

croniter is imported by the functions that use it: run processes load this module with the
code location and never evaluate a cron; sensors and the CLI/API do.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, available_timezones

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import whole_number_in

# A leap year: beyond that an interval is not a schedule anybody means.
MAX_EVERY_MINUTES = 366 * 24 * 60
# Files of the zone database that name no place: the server's own zone, the POSIX rules template, and
# "Factory", whose only abbreviation says the zone was never set.
NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.cache
def iana_timezones() -> frozenset[str]:
    """The IANA zone names a schedule may use: the zone database's, less its files that are no zone."""
    return frozenset(available_timezones()) - NOT_ZONES


def validate_timezone(timezone: str, *, field: str = "timezone") -> ZoneInfo:
    """An IANA zone by name. Anything else is refused, a name ZoneInfo would still open too: `localtime` would
    mean the server's zone, and a path the file it names."""
    if timezone not in iana_timezones():
        raise InvalidInputError(
            field, f"unknown timezone {timezone!r}; use an IANA name such as UTC or Europe/Stockholm"
        )
    return ZoneInfo(timezone)


def validate_cron(cron: str, *, field: str = "cron") -> str:
    """Five valid fields that name a time that exists: `0 0 30 2 *` (February 30th) never fires, so it is refused
    here rather than by the scheduler failing to find its next fire."""
    from croniter import CroniterBadDateError, croniter

    expression = " ".join(cron.split())
    if len(expression.split(" ")) != 5 or not croniter.is_valid(expression):
        raise InvalidInputError(
            field,
            f"invalid cron expression {cron!r}; use five fields: minute hour day month weekday, e.g. '0 6 * * 1-5'",
        )
    try:
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidInputError(
            field,
            f"cron expression {cron!r} never fires (no such date, e.g. February 30th); "
            "give a day that exists in the months named",
        ) from None
    return expression


def wall_clock(instant: datetime, zone: ZoneInfo) -> datetime:
    """What a clock in `zone` shows at `instant`, as a naive datetime."""
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def wall_time_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant (UTC) a naive wall time in `zone` fires at: its first occurrence when the clock shows
    it twice, the moment the clock jumps over it when the clock skips it."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)  # fold=0: the earlier of two occurrences
    if wall_clock(first, zone) == wall:
        return first
    # Skipped: read with the offsets before and after the jump, it names two instants the jump lies
    # between; find the jump to the second.
    low, high = sorted((first, wall.replace(tzinfo=zone, fold=1).astimezone(UTC)))
    while high - low > timedelta(seconds=1):
        middle = low + timedelta(seconds=(high - low) // timedelta(seconds=1) // 2)
        if wall_clock(middle, zone) > wall:
            high = middle
        else:
            low = middle
    return high


def next_cron_fire(cron: str, timezone: str, *, after: datetime) -> datetime:
    """The first fire strictly after `after` of the wall times `cron` names in `timezone`, in UTC.

    From an aware start croniter fires a wall time the clock shows twice at both of its instants
    (its `_add_tzinfo` takes the occurrence next after the start, and after the first comes the
    second: `30 2 * * *` in Europe/Stockholm fired at 00:30 and 01:30 UTC on 2026-10-25). From a
    naive start it only does calendar arithmetic; each match is placed by `wall_time_instant`, and a
    match whose instant is not after `after` (the second pass through a repeated hour, or a skipped
    time whose jump another match already fired at) is passed over.
    """
    from croniter import croniter

    zone = ZoneInfo(timezone)
    matches = croniter(cron, wall_clock(after, zone))
    while True:
        instant = wall_time_instant(matches.get_next(datetime), zone)
        if instant > after:
            return instant


def next_interval_fire(every_minutes: int, *, after: datetime, due: datetime | None = None) -> datetime:
    """The first time strictly after `after` that is a whole number of periods from `due`: an interval
    keeps the phase of its due time, and a late tick skips the whole periods it missed (no catch-up).
    Without a due time (a new or edited schedule), `after` + N."""
    period = timedelta(minutes=every_minutes)
    if due is None:
        return (after + period).astimezone(UTC)
    return (due + (after - due) // period * period + period).astimezone(UTC)


def validate_interval(every_minutes: int, *, field: str = "every_minutes") -> int:
    if not whole_number_in(every_minutes, 1, MAX_EVERY_MINUTES):
        raise InvalidInputError(
            field, f"must be a whole number of minutes, 1 or more and at most {MAX_EVERY_MINUTES} (a leap year)"
        )
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

    def next_fire_after(self, moment: datetime, *, due: datetime | None = None) -> datetime:
        """The next fire time after `moment`; `due`, the fire being claimed, is where an interval
        counts from (a cron's fire times do not depend on it)."""
        if self.cron is not None and self.timezone is not None:
            return next_cron_fire(self.cron, self.timezone, after=moment)
        assert self.every_minutes is not None
        return next_interval_fire(self.every_minutes, after=moment, due=due)


def _schedule_triggers() -> sa.Select[PipelineTrigger]:
    return sa.select(PipelineTrigger).where(PipelineTrigger.kind == TriggerKind.SCHEDULE.value)


def schedule_triggers(session: Session, pipeline_ids: Iterable[int]) -> dict[int, PipelineTrigger]:
    """Each pipeline's schedule trigger (a pipeline has at most one), by pipeline id."""
    rows = session.scalars(_schedule_triggers().where(PipelineTrigger.pipeline_id.in_(list(pipeline_ids))))
    return {trigger.pipeline_id: trigger for trigger in rows}


def set_schedule(
    session: Session, pipeline: Pipeline, spec: ScheduleSpec | None, *, now: datetime
) -> PipelineTrigger | None:
    """Make the pipeline's schedule trigger say `spec` (validated): created, changed, or removed for None.

    An unchanged schedule keeps its next fire time, so re-saving a pipeline does not move it; a
    changed one gets a new one, except on a switched-off trigger, which keeps none.
    """
    trigger = schedule_triggers(session, [pipeline.id]).get(pipeline.id)
    if spec is None:
        if trigger is not None:
            session.delete(trigger)
        return None
    if trigger is None:
        trigger = PipelineTrigger(
            workspace_id=pipeline.workspace_id,
            pipeline_id=pipeline.id,
            kind=TriggerKind.SCHEDULE.value,
            enabled=True,
        )
        session.add(trigger)
    elif ScheduleSpec.of(trigger) == spec:
        return trigger
    trigger.cron, trigger.timezone, trigger.interval_minutes = spec.cron, spec.timezone, spec.every_minutes
    trigger.next_fire_at = spec.next_fire_after(now) if trigger.enabled else None
    session.flush()
    return trigger
