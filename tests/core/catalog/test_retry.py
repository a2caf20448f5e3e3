"""Per-pipeline retry policies: the waits of each backoff, and what is refused."""

from __future__ import annotations

import math

import pytest

from pipelines_dagster.app_db.models import RetryBackoff
from pipelines_dagster.core.catalog.retry import MAX_DELAY_SECONDS, RetryPolicy, validate_retry_policy
from pipelines_dagster.core.errors import InvalidInputError


def test_linear_backoff_adds_the_base_delay_per_retry():
    policy = validate_retry_policy(backoff="linear", max_retries=4, delay_seconds=1.5)
    assert [policy.delay(n) for n in range(1, 5)] == [1.5, 3.0, 4.5, 6.0]


def test_exponential_backoff_doubles_from_the_base_delay():
    policy = validate_retry_policy(backoff="exponential", max_retries=4, delay_seconds=2)
    assert [policy.delay(n) for n in range(1, 5)] == [2.0, 4.0, 8.0, 16.0]


def test_no_wait_is_longer_than_an_hour():
    policy = RetryPolicy(backoff=RetryBackoff.EXPONENTIAL, max_retries=10, delay_seconds=600)
    assert policy.delay(10) == MAX_DELAY_SECONDS and policy.delay(2) == 1200


def test_the_policy_is_described_with_its_first_waits():
    assert RetryPolicy().describe() == "exponential backoff, up to 3 retries, waiting 2, 4, 8 s"
    assert RetryPolicy(backoff=RetryBackoff.LINEAR, max_retries=6, delay_seconds=5).describe() == (
        "linear backoff, up to 6 retries, waiting 5, 10, 15, 20, ... s"
    )
    assert RetryPolicy(max_retries=0).describe() == "no retries"


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"backoff": "fibonacci"}, "retry_policy.backoff"),
        ({"max_retries": -1}, "retry_policy.max_retries"),
        ({"max_retries": 11}, "retry_policy.max_retries"),
        ({"max_retries": True}, "retry_policy.max_retries"),
        ({"delay_seconds": 0}, "retry_policy.delay_seconds"),
        ({"delay_seconds": -2}, "retry_policy.delay_seconds"),
        ({"delay_seconds": math.inf}, "retry_policy.delay_seconds"),
        ({"delay_seconds": math.nan}, "retry_policy.delay_seconds"),
        ({"delay_seconds": 3601}, "retry_policy.delay_seconds"),
    ],
)
def test_an_invalid_policy_is_refused_with_the_field_named(given, field):
    with pytest.raises(InvalidInputError) as refused:
        validate_retry_policy(**given)
    assert refused.value.field == field
