"""The HTTP headers a crawl reads and sends beyond the request itself: how long a Retry-After asks to wait, and the
validators that make a re-crawl's request conditional."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from pipelines_dagster.core.crawl.types import PreviousFetch


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a Retry-After header (delta seconds or an HTTP date) asks to wait; None if absent or invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def conditional_headers(previous: PreviousFetch | None) -> dict[str, str]:
    # The validators came from the final response of this URL's redirect chain; sending them on
    # every hop is harmless because a redirecting hop has other validators and never matches.
    headers: dict[str, str] = {}
    if previous is not None and previous.etag:
        headers["If-None-Match"] = previous.etag
    if previous is not None and previous.last_modified:
        headers["If-Modified-Since"] = previous.last_modified
    return headers
