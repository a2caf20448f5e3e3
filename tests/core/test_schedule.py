"""Cron and interval maths: timezones, DST, validation messages."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipelines_dagster.core.schedule import (
    next_cron_fire,
    next_interval_fire,
    validate_cron,
    validate_timezone,
)
from pipelines_dagster.core.validation import InvalidInputError, validate_url, validate_urls


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


@pytest.mark.parametrize("cron", ["* * * *", "61 * * * *", "* * * * * *", "every day", ""])
def test_invalid_cron_is_explained(cron):
    with pytest.raises(InvalidInputError, match="five fields"):
        validate_cron(cron)


def test_cron_whitespace_is_normalized():
    assert validate_cron("  0   6 * *  1-5 ") == "0 6 * * 1-5"


@pytest.mark.parametrize("timezone", ["Mars/Olympus", "../../etc/passwd", "", "UTC+5"])
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
