"""A pipeline's retry policy: how a failed crawl is tried again, as the reference's StepRetryPolicy.

Retry n (from 1) waits `delay_seconds * n` with linear backoff and `delay_seconds * 2**(n-1)` with
exponential backoff, never more than MAX_DELAY_SECONDS. Guard refusals (a disabled pipeline, no
credit, a held lock) are final and never retried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipelines_dagster.app_db.models import Pipeline, RetryBackoff
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import validate_choice, whole_number_in

MAX_RETRIES = 10
# A second at least: a smaller wait retries at once against what just failed (1e-300 s was accepted).
MIN_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 3600.0
DEFAULT_BACKOFF = RetryBackoff.EXPONENTIAL
DEFAULT_MAX_RETRIES = 3
DEFAULT_DELAY_SECONDS = 2.0


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    backoff: RetryBackoff = DEFAULT_BACKOFF
    max_retries: int = DEFAULT_MAX_RETRIES
    delay_seconds: float = DEFAULT_DELAY_SECONDS

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 is the first retry)."""
        if retry < 1:
            raise ValueError(f"retries count from 1, got {retry}")
        factor = retry if self.backoff is RetryBackoff.LINEAR else 2 ** min(retry - 1, 62)
        return min(self.delay_seconds * factor, MAX_DELAY_SECONDS)

    def describe(self) -> str:
        if self.max_retries == 0:
            return "no retries"
        waits = ", ".join(f"{self.delay(n):g}" for n in range(1, min(self.max_retries, 4) + 1))
        more = ", ..." if self.max_retries > 4 else ""
        return f"{self.backoff.value} backoff, up to {self.max_retries} retries, waiting {waits}{more} s"

    @classmethod
    def of(cls, pipeline: Pipeline) -> RetryPolicy:
        return cls(
            backoff=RetryBackoff(pipeline.retry_backoff),
            max_retries=pipeline.retry_max,
            delay_seconds=pipeline.retry_delay_seconds,
        )

    def apply_to(self, pipeline: Pipeline) -> None:
        pipeline.retry_backoff = self.backoff.value
        pipeline.retry_max = self.max_retries
        pipeline.retry_delay_seconds = self.delay_seconds


def validate_retry_policy(
    *,
    backoff: str = DEFAULT_BACKOFF.value,
    max_retries: int = DEFAULT_MAX_RETRIES,
    delay_seconds: float = DEFAULT_DELAY_SECONDS,
    field: str = "retry_policy",
) -> RetryPolicy:
    """A checked policy; InvalidInputError names the field (`retry_policy.backoff`, ...) that is wrong."""
    kind = validate_choice(RetryBackoff, backoff, field=f"{field}.backoff", what="backoff")
    if not whole_number_in(max_retries, 0, MAX_RETRIES):
        raise InvalidInputError(f"{field}.max_retries", f"must be a whole number from 0 to {MAX_RETRIES}")
    if (
        isinstance(delay_seconds, bool)
        or not isinstance(delay_seconds, int | float)
        or not math.isfinite(delay_seconds)
        or not MIN_DELAY_SECONDS <= delay_seconds <= MAX_DELAY_SECONDS
    ):
        raise InvalidInputError(
            f"{field}.delay_seconds",
            f"must be from {MIN_DELAY_SECONDS:g} to {MAX_DELAY_SECONDS:g} seconds, got {delay_seconds!r}",
        )
    return RetryPolicy(backoff=kind, max_retries=max_retries, delay_seconds=float(delay_seconds))
