"""How one crawl shares the hosts it visits: a slot per host and globally, the host budget shared with
other crawls, and the Crawl-delay pacing robots.txt asks for; how long each made its requests wait."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Mapping

import httpx

from pipelines_dagster.core.crawl.host_budget import HostBudget
from pipelines_dagster.core.crawl.robots import origin
from pipelines_dagster.core.crawl.throttle import Limiter, RequestWaits, at_once


class HostSlots:
    """The slots and turns one crawl's requests wait for."""

    def __init__(
        self,
        *,
        per_host: int,
        global_concurrency: int,
        crawl_delays: Mapping[str, float],
        host_budget: HostBudget | None = None,
        waits: RequestWaits | None = None,
    ) -> None:
        self._per_host = per_host
        self._global_concurrency = global_concurrency
        self._global = asyncio.Semaphore(global_concurrency)
        self._hosts: dict[str, asyncio.Semaphore] = {}
        # Requests queued for a host[:port], to which a finished request hands its shared slot.
        self._queued: collections.Counter[str] = collections.Counter()
        self._crawl_delays = crawl_delays
        """Each origin's Crawl-delay, filled in as robots.txt files are read."""
        self._next_request_at: dict[str, float] = {}
        self._budget = host_budget
        self.waits = waits or RequestWaits()
        """How long requests waited for each limiter, which the crawl reports as what limits its rate."""

    @contextlib.asynccontextmanager
    async def request(self, url: httpx.URL, *, host: str) -> AsyncIterator[None]:
        """One request's turn: its origin's next request time under a Crawl-delay, then its slots."""
        delay = await self._pace(url)
        async with self._slots(url, host=host, delay=delay):
            yield

    async def _pace(self, url: httpx.URL) -> float:
        """Wait for the origin's next request time when its robots.txt asks for a Crawl-delay; that delay."""
        if not self._crawl_delays:
            return 0.0
        key = origin(url)
        delay = self._crawl_delays.get(key)
        if not delay:
            return 0.0
        # One event loop and no await until the slot is booked: each request gets its own time.
        now = time.monotonic()
        start = max(now, self._next_request_at.get(key, now))
        self._next_request_at[key] = start + delay
        self.waits.waited(Limiter.CRAWL_DELAY, key, start - now, setting=f"{delay:g} s between requests")
        if start > now:
            await asyncio.sleep(start - now)
        return delay

    @contextlib.asynccontextmanager
    async def _slots(self, url: httpx.URL, *, host: str, delay: float) -> AsyncIterator[None]:
        """Hold a host slot of this crawl, one of the budget shared with other crawls, and a global slot.

        In that order: a request queued behind a busy host must hold neither a shared slot another
        crawl could use nor a global slot that a request to an idle host could use. Under a
        Crawl-delay the host's turn, shared with other crawls, comes last and lasts the request.
        """
        host_slots = self._hosts.get(host)
        if host_slots is None:
            host_slots = self._hosts[host] = asyncio.Semaphore(self._per_host)
        budget = self._budget
        shared_host = url.netloc.decode("ascii")  # host[:port], lower-cased, IDNA, no default port
        shared = (
            budget.slot(
                shared_host,
                concurrency=self._per_host,
                waiting=lambda: self._queued[shared_host],
            )
            if budget is not None
            else contextlib.nullcontext()
        )
        turn = budget.turn(shared_host, delay=delay) if budget is not None and delay else contextlib.nullcontext()
        self._queued[shared_host] += 1
        since = time.monotonic()
        try:
            await host_slots.acquire()
        finally:
            self._queued[shared_host] -= 1
        at_a_time = at_once(self._per_host)
        since = self._waited(Limiter.HOST_CONCURRENCY, host, since, setting=at_a_time)
        budgeted = f"{at_a_time}, {delay:g} s apart" if delay else at_a_time
        try:
            async with contextlib.AsyncExitStack() as held:
                await held.enter_async_context(shared)
                since = self._waited(Limiter.HOST_BUDGET, shared_host, since, setting=budgeted)
                await held.enter_async_context(self._global)
                since = self._waited(Limiter.GLOBAL_CONCURRENCY, "", since, setting=at_once(self._global_concurrency))
                await held.enter_async_context(turn)
                self._waited(Limiter.HOST_BUDGET, shared_host, since, setting=budgeted)
                yield
        finally:
            host_slots.release()

    def _waited(self, limiter: Limiter, where: str, since: float, *, setting: str) -> float:
        """Count the wait for `limiter` that began at `since`; when it ended, now."""
        now = time.monotonic()
        self.waits.waited(limiter, where, now - since, setting=setting)
        return now
