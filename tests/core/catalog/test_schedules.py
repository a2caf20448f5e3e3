"""Cron and interval maths: timezones, DST (both transitions, two zones), phase, validation messages."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from pipelines_dagster.core.catalog.schedules import (
    ScheduleSpec,
    next_cron_fire,
    next_interval_fire,
    validate_cron,
    validate_timezone,
    wall_clock,
    wall_time_instant,
)
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import validate_url, validate_urls


def test_next_cron_fire_is_evaluated_in_the_schedules_timezone_across_dst():
    # Stockholm leaves summer time on 2026-10-25: 06:00 local is 04:00 UTC before, 05:00 after.
    before = next_cron_fire("0 6 * * *", "Europe/Stockholm", after=datetime(2026, 10, 24, 12, tzinfo=UTC))
    after = next_cron_fire("0 6 * * *", "Europe/Stockholm", after=datetime(2026, 10, 25, 12, tzinfo=UTC))
    assert before == datetime(2026, 10, 25, 5, tzinfo=UTC)
    assert after == datetime(2026, 10, 26, 5, tzinfo=UTC)
    summer = next_cron_fire("0 6 * * *", "Europe/Stockholm", after=datetime(2026, 7, 1, 12, tzinfo=UTC))
    assert summer == datetime(2026, 7, 2, 4, tzinfo=UTC)


def test_next_cron_fire_is_strictly_after_the_given_moment():
    moment = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert next_cron_fire("0 8 * * *", "UTC", after=moment) == datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
    assert next_cron_fire("* * * * *", "UTC", after=moment) == datetime(2026, 12, 1, 8, 1, tzinfo=UTC)


def test_next_interval_fire():
    assert next_interval_fire(15, after=datetime(2026, 12, 1, 8, tzinfo=UTC)) == datetime(
        2026, 12, 1, 8, 15, tzinfo=UTC
    )


def utc(month: int, day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


DUE = utc(12, 1, 8)


@pytest.mark.parametrize(
    ("tick", "expected"),
    [
        (DUE, DUE + timedelta(minutes=15)),
        # A tick 40 s late: the phase is the due time's, not the tick's.
        (DUE + timedelta(seconds=40), DUE + timedelta(minutes=15)),
        # Three periods and a bit late: the missed periods are skipped, not caught up.
        (DUE + timedelta(minutes=47), DUE + timedelta(minutes=60)),
        (DUE + timedelta(minutes=45), DUE + timedelta(minutes=60)),
    ],
)
def test_an_interval_keeps_the_phase_of_its_due_time(tick, expected):
    assert next_interval_fire(15, after=tick, due=DUE) == expected
    assert ScheduleSpec(every_minutes=15).next_fire_after(tick, due=DUE) == expected


def fires_between(cron: str, timezone: str, start: datetime, end: datetime) -> Iterator[datetime]:
    """Every fire after `start` up to `end`, each computed from the one before, as the scheduler does."""
    moment = start
    while (moment := next_cron_fire(cron, timezone, after=moment)) <= end:
        yield moment


# 2026's transitions: Stockholm jumps at 01:00 UTC on 29 March and 25 October, New York at 07:00 UTC
# on 8 March and 06:00 UTC on 1 November.
STOCKHOLM, NEW_YORK = "Europe/Stockholm", "America/New_York"


def test_the_found_bug_a_repeated_wall_time_fires_once_at_its_first_occurrence():
    # 02:30 happens at 00:30 UTC (CEST) and again at 01:30 UTC (CET) on 2026-10-25.
    assert list(fires_between("30 2 * * *", STOCKHOLM, utc(10, 24, 12), utc(10, 26, 12))) == [
        utc(10, 25, 0, 30),
        utc(10, 26, 1, 30),
    ]


@pytest.mark.parametrize(
    ("cron", "timezone", "start", "expected"),
    [
        # Fall-back: the repeated hour is 02:00-03:00 in Stockholm, 01:00-02:00 in New York.
        ("30 2 * * *", STOCKHOLM, utc(10, 24, 12), [utc(10, 25, 0, 30), utc(10, 26, 1, 30)]),
        ("0 2 * * *", STOCKHOLM, utc(10, 24, 12), [utc(10, 25, 0), utc(10, 26, 1)]),
        ("30 1 * * *", NEW_YORK, utc(10, 31, 12), [utc(11, 1, 5, 30), utc(11, 2, 6, 30)]),
        ("0 1 * * *", NEW_YORK, utc(10, 31, 12), [utc(11, 1, 5), utc(11, 2, 6)]),
        # Spring-forward: 02:00-03:00 does not happen in either zone; it fires at the jump, once.
        ("30 2 * * *", STOCKHOLM, utc(3, 28, 12), [utc(3, 29, 1), utc(3, 30, 0, 30)]),
        ("0 2 * * *", STOCKHOLM, utc(3, 28, 12), [utc(3, 29, 1), utc(3, 30, 0)]),
        ("30 2 * * *", NEW_YORK, utc(3, 7, 12), [utc(3, 8, 7), utc(3, 9, 6, 30)]),
        # Next to the transitions, nothing moves.
        ("30 1 * * *", STOCKHOLM, utc(10, 24, 12), [utc(10, 24, 23, 30), utc(10, 26, 0, 30)]),
        ("30 3 * * *", NEW_YORK, utc(3, 7, 12), [utc(3, 8, 7, 30), utc(3, 9, 7, 30)]),
    ],
)
def test_a_daily_cron_fires_once_a_day_across_both_transitions_in_two_zones(cron, timezone, start, expected):
    assert list(fires_between(cron, timezone, start, start + timedelta(days=1, hours=20))) == expected


def quarter_hours(start: datetime, end: datetime, *, skip: tuple[datetime, datetime] | None = None) -> list[datetime]:
    """Every quarter hour from `start` to `end` (UTC), without those in [skip)."""
    moments, moment = [], start
    while moment <= end:
        if skip is None or not skip[0] <= moment < skip[1]:
            moments.append(moment)
        moment += timedelta(minutes=15)
    return moments


@pytest.mark.parametrize(
    ("timezone", "start", "repeated"),
    [
        # The second pass through the repeated hour, in UTC: its wall times have fired already.
        (STOCKHOLM, utc(10, 24, 22), (utc(10, 25, 1), utc(10, 25, 2))),
        (NEW_YORK, utc(11, 1, 3), (utc(11, 1, 6), utc(11, 1, 7))),
    ],
)
def test_every_15_minutes_across_fall_back_fires_each_wall_time_once(timezone, start, repeated):
    end = start + timedelta(hours=6)
    fires = list(fires_between("*/15 * * * *", timezone, start, end))
    assert fires == quarter_hours(start + timedelta(minutes=15), end, skip=repeated)
    walls = [wall_clock(fire, ZoneInfo(timezone)) for fire in fires]
    assert len(set(walls)) == len(walls) == 20  # 6 h of wall time less the hour shown twice, once each


@pytest.mark.parametrize(("timezone", "start"), [(STOCKHOLM, utc(3, 28, 22)), (NEW_YORK, utc(3, 8, 4))])
def test_every_15_minutes_across_spring_forward_loses_and_doubles_no_instant(timezone, start):
    # The skipped 02:00-02:45 fire at the jump, which is 03:00's instant: one fire there, not five.
    end = start + timedelta(hours=6)
    assert list(fires_between("*/15 * * * *", timezone, start, end)) == quarter_hours(
        start + timedelta(minutes=15), end
    )


@pytest.mark.parametrize(
    ("timezone", "start", "expected"),
    [
        # Fall-back: 02:00 CEST fires (00:00 UTC), 02:00 CET (01:00 UTC) is the same wall time again.
        (STOCKHOLM, utc(10, 24, 22), [utc(10, 24, 23), utc(10, 25, 0), utc(10, 25, 2), utc(10, 25, 3)]),
        (NEW_YORK, utc(11, 1, 3), [utc(11, 1, 4), utc(11, 1, 5), utc(11, 1, 7), utc(11, 1, 8)]),
        # Spring-forward: 02:00 does not happen and fires at the jump, which is 03:00: every real hour fires.
        (STOCKHOLM, utc(3, 28, 22), [utc(3, 28, 23), utc(3, 29, 0), utc(3, 29, 1), utc(3, 29, 2), utc(3, 29, 3)]),
        (NEW_YORK, utc(3, 8, 4), [utc(3, 8, 5), utc(3, 8, 6), utc(3, 8, 7), utc(3, 8, 8), utc(3, 8, 9)]),
    ],
)
def test_an_hourly_cron_fires_each_wall_clock_hour_once_across_both_transitions(timezone, start, expected):
    assert list(fires_between("0 * * * *", timezone, start, start + timedelta(hours=5))) == expected


@pytest.mark.parametrize(
    ("timezone", "start"),
    [(STOCKHOLM, utc(3, 28, 12)), (STOCKHOLM, utc(10, 24, 12)), (NEW_YORK, utc(3, 7, 12)), (NEW_YORK, utc(10, 31, 12))],
)
@pytest.mark.parametrize("cron", ["* * * * *", "*/15 * * * *", "0 * * * *", "30 2 * * *", "30 1 * * *", "0 3 * * *"])
def test_every_wall_time_a_cron_names_fires_once_and_no_instant_twice(cron, timezone, start):
    zone = ZoneInfo(timezone)
    end = start + timedelta(days=2)
    fires = list(fires_between(cron, timezone, start, end))
    assert fires == sorted(set(fires))  # strictly increasing: no instant twice
    walls = croniter(cron, wall_clock(start, zone))
    named = []
    while (wall := walls.get_next(datetime)) <= wall_clock(end, zone) - timedelta(hours=3):
        named.append(wall)
    # Each named wall time fires once, at its first occurrence or at the jump over it.
    assert [fire for fire in fires if fire <= wall_time_instant(named[-1], zone)] == sorted(
        {wall_time_instant(wall, zone) for wall in named}
    )


def test_a_wall_time_names_its_first_occurrence_or_the_jump_over_it():
    stockholm, new_york = ZoneInfo(STOCKHOLM), ZoneInfo(NEW_YORK)
    assert wall_time_instant(datetime(2026, 10, 25, 2, 30), stockholm) == utc(10, 25, 0, 30)
    assert wall_time_instant(datetime(2026, 10, 25, 3, 0), stockholm) == utc(10, 25, 2)
    assert wall_time_instant(datetime(2026, 3, 29, 2, 30), stockholm) == utc(3, 29, 1)
    assert wall_time_instant(datetime(2026, 3, 29, 2, 0), stockholm) == utc(3, 29, 1)
    assert wall_time_instant(datetime(2026, 11, 1, 1, 59), new_york) == utc(11, 1, 5, 59)
    assert wall_time_instant(datetime(2026, 3, 8, 2, 59), new_york) == utc(3, 8, 7)
    assert wall_time_instant(datetime(2026, 7, 1, 12, 0), new_york) == utc(7, 1, 16)


@pytest.mark.parametrize("cron", ["* * * *", "61 * * * *", "* * * * * *", "every day", ""])
def test_invalid_cron_is_explained(cron):
    with pytest.raises(InvalidInputError, match="five fields"):
        validate_cron(cron)


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 2 *", "0 0 31 4,6,9,11 *", "15 3 30,31 2 *"])
def test_a_cron_that_never_fires_is_refused(cron):
    with pytest.raises(InvalidInputError, match="never fires"):
        validate_cron(cron)


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 L 2 *", "0 0 31 * *", "0 0 30 2 1"])
def test_a_cron_that_fires_rarely_or_by_weekday_is_kept(cron):
    assert validate_cron(cron) == cron


def test_cron_whitespace_is_normalized():
    assert validate_cron("  0   6 * *  1-5 ") == "0 6 * * 1-5"


@pytest.mark.parametrize(
    "timezone",
    [
        "Mars/Olympus",
        "../../etc/passwd",
        "",
        "UTC+5",
        # Files of the zone database that ZoneInfo opens but that are no zone: the server's own, a template.
        "localtime",
        "posixrules",
        "Factory",
        "/usr/share/zoneinfo/UTC",
        "Europe/../UTC",
        "europe/stockholm",
    ],
)
def test_unknown_timezone_is_explained(timezone):
    with pytest.raises(InvalidInputError, match="IANA name"):
        validate_timezone(timezone)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("example.com", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("http://", "no host name"),
        ("https://exa mple.com", "spaces"),
        ("https://example.com:99999/", "malformed URL"),
        ("https://u:p@example.com/", "credentials"),
    ],
)
def test_bad_urls_are_explained(url, reason):
    with pytest.raises(InvalidInputError, match=reason):
        validate_url(url)


def test_urls_are_deduplicated_in_order():
    assert validate_urls([" https://a.example/ ", "https://b.example/", "https://a.example/"]) == [
        "https://a.example/",
        "https://b.example/",
    ]
