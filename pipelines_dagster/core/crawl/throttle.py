"""What holds one crawl's requests back: the time they wait, by limiter and host, and the limiters that
limit its rate (a robots.txt Crawl-delay, the host budget shared by all runs, per-host or global concurrency)."""

from __future__ import annotations

import enum
import threading
from collections.abc import Sequence
from dataclasses import dataclass


class Limiter(enum.Enum):
    CRAWL_DELAY = "robots.txt Crawl-delay"
    HOST_BUDGET = "the host budget shared by all runs"
    HOST_CONCURRENCY = "per-host concurrency"
    GLOBAL_CONCURRENCY = "global concurrency"


# A limiter limits the rate when its requests waited, summed, at least this share of the crawl's time
# so far (a tenth: on average one request in ten was waiting for it), and at least LIMITING_SECONDS.
LIMITING_SHARE = 0.1
LIMITING_SECONDS = 1.0
# A slot taken at once still takes a few microseconds: not a wait.
_NOT_A_WAIT_SECONDS = 0.001
LIMITS_NAMED = 2


@dataclass(frozen=True)
class Limit:
    """A limiter of one host (of all hosts for global concurrency), and how long requests waited for it."""

    limiter: Limiter
    where: str
    """The origin a Crawl-delay spaces, the host[:port] of a budget or a host's slots; empty for global."""
    setting: str
    """What it allows, e.g. "2 s between requests"."""
    waited_seconds: float
    requests: int

    def __str__(self) -> str:
        on = f" of {self.where}" if self.where else ""
        return (
            f"{self.limiter.value}{on} ({self.setting}): {self.requests} requests waited "
            f"{self.waited_seconds:.1f} s in all"
        )


def at_once(requests: int) -> str:
    """A concurrency limit's setting."""
    return f"{requests} request{'' if requests == 1 else 's'} at a time"


def describe_limits(limits: Sequence[Limit]) -> str | None:
    """The limiters named in one sentence, the longest wait first; None when nothing held requests back."""
    return "; ".join(map(str, limits[:LIMITS_NAMED])) or None


class RequestWaits:
    """The waits of one crawl's requests, as its host slots hand out turns; read from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: dict[tuple[Limiter, str], tuple[str, float, int]] = {}

    def waited(self, limiter: Limiter, where: str, seconds: float, *, setting: str) -> None:
        if seconds < _NOT_A_WAIT_SECONDS:
            return
        key = (limiter, where)
        with self._lock:
            _, total, requests = self._waits.get(key, ("", 0.0, 0))
            self._waits[key] = (setting, total + seconds, requests + 1)

    def limits(self, elapsed_seconds: float) -> list[Limit]:
        """What limited the rate over `elapsed_seconds` of crawling, the longest wait first."""
        enough = max(LIMITING_SECONDS, LIMITING_SHARE * elapsed_seconds)
        with self._lock:
            waits = list(self._waits.items())
        found = [
            Limit(limiter, where, setting, waited, requests)
            for (limiter, where), (setting, waited, requests) in waits
            if waited >= enough
        ]
        return sorted(found, key=lambda limit: limit.waited_seconds, reverse=True)
