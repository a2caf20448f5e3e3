"""robots.txt as RFC 9309 reads it, fetched once per origin and crawl: its rules for each URL, the
Crawl-delay it asks for, and the sitemaps it names."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from protego import Protego

from pipelines_dagster.core.crawl.types import FetchFailed

# RFC 9309 (2.5): a crawler must parse at least the first 500 KiB of a robots.txt; the rest of a
# larger one is not read.
ROBOTS_MAX_BYTES = 500 * 1024
# RFC 9309 (2.3.1.2): at least five consecutive redirects are followed for robots.txt, whatever
# the crawl's own redirect limit.
ROBOTS_MAX_REDIRECTS = 5


@dataclass(frozen=True)
class RobotsDown:
    """A robots.txt that answered 5xx or could not be reached: its host is not crawled this run."""

    reason: str


Robots = Protego | RobotsDown | None

RobotsFetch = Callable[[str], Awaitable[tuple[int, bytes]]]
"""Fetches a robots.txt URL through the crawl's guards: its final status and its body, read to
ROBOTS_MAX_BYTES; FetchFailed when it could not be had."""


def origin(url: httpx.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode('ascii')}"


class RobotsRules:
    """The robots.txt of each origin one crawl meets."""

    def __init__(self, fetch: RobotsFetch, *, user_agent: str, max_crawl_delay: float) -> None:
        self._fetch = fetch
        self._user_agent = user_agent
        self._max_crawl_delay = max_crawl_delay
        self._rules: dict[str, Robots] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.crawl_delays: dict[str, float] = {}
        """The Crawl-delay of each origin that asks for one, capped at the crawl's maximum."""

    async def sitemaps(self, url: str) -> list[str]:
        """The sitemaps the robots.txt of `url`'s origin names."""
        rules = await self.of(httpx.URL(url))
        return list(rules.sitemaps) if isinstance(rules, Protego) else []

    async def check(self, url: str, parts: httpx.URL) -> None:
        """Raise FetchFailed when the origin's robots.txt disallows `url`, or could not be had."""
        rules = await self.of(parts)
        if isinstance(rules, RobotsDown):
            raise FetchFailed(rules.reason)
        if rules is not None and not rules.can_fetch(url, self._user_agent):
            raise FetchFailed("disallowed by robots.txt")

    async def of(self, parts: httpx.URL) -> Robots:
        key = origin(parts)
        if key not in self._rules:
            # One robots.txt request per origin even when many of its URLs start together.
            async with self._locks.setdefault(key, asyncio.Lock()):
                if key not in self._rules:
                    rules = self._rules[key] = await self._load(key)
                    delay = rules.crawl_delay(self._user_agent) if isinstance(rules, Protego) else None
                    if delay:
                        self.crawl_delays[key] = min(float(delay), self._max_crawl_delay)
        return self._rules[key]

    async def _load(self, origin: str) -> Robots:
        """The origin's robots.txt rules, as RFC 9309 reads them.

        Its first ROBOTS_MAX_BYTES are parsed, however long it is. None (allow all) when it is
        unavailable: a 4xx, more than ROBOTS_MAX_REDIRECTS redirects (2.3.1.2 lets a crawler take
        that as unavailable), a redirect the guards refuse. A 5xx, a 429 (Google's reading: a
        server asking to slow down has not said its pages are open), a timeout or a connection
        error, each after the usual retries, make it unreachable: the origin is then completely
        disallowed for this crawl (2.3.1.4), each of its URLs failing with the reason.
        """
        try:
            status, body = await self._fetch(f"{origin}/robots.txt")
        except FetchFailed as exc:
            if not exc.unreachable:
                return None
            why = f"answered {exc}" if str(exc).startswith("HTTP ") else f"could not be reached: {exc}"
            return RobotsDown(
                f"robots.txt {why}; the host is not crawled this run (RFC 9309: assume complete disallow), "
                "the next crawl tries again"
            )
        if not 200 <= status < 300:
            return None
        return Protego.parse(body[:ROBOTS_MAX_BYTES].decode("utf-8", errors="replace"))
