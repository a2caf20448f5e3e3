"""One politeness budget per host across all runs: concurrency slots and Crawl-delay turns as leases in `Locks`.

The leases live in the locks backend (Redis or the app database), so crawls in other processes and
other workspaces that reach the same host draw on the same budget instead of each bringing its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from pipelines_dagster.core.storage.locks import Locks

T = TypeVar("T")

logger = logging.getLogger(__name__)


class HostBudgetError(RuntimeError):
    """The locks backend holding the budget could not be reached, so the request was not sent."""


def slot_lock_name(host: str, index: int) -> str:
    return f"host:{host}:slot:{index}"


def turn_lock_name(host: str) -> str:
    return f"host:{host}:next"


class HostBudget:
    """Per-host concurrency slots and Crawl-delay turns shared by every crawl using the same `Locks`.

    Slots and turns are leases taken for `lease_ttl` seconds and renewed while their request runs,
    so a crawl that dies holding one frees it within `lease_ttl`. Waiting polls the backend with a
    jittered backoff from `poll` to `max_poll` seconds; every backend call runs in a thread, off
    the event loop. A wait cancelled while its call is under way may leave the lease it took to
    its TTL, like a crash.
    """

    def __init__(
        self,
        locks: Locks,
        *,
        lease_ttl: float = 10.0,
        poll: float = 0.01,
        max_poll: float = 0.2,
        hand_over_for: float = 1.0,
    ) -> None:
        if lease_ttl <= 0 or not 0 < poll <= max_poll or not 0 <= hand_over_for < lease_ttl / 2:
            raise ValueError(
                "need lease_ttl > 0, 0 < poll <= max_poll and 0 <= hand_over_for < lease_ttl / 2, got "
                f"{lease_ttl}, {poll}, {max_poll}, {hand_over_for}"
            )
        self._locks = locks
        self._lease_ttl = lease_ttl
        self._hand_over_for = hand_over_for
        # Slots handed over by a request that ended to the next request of this budget: (name, owner, taken at).
        self._parked: dict[str, list[tuple[str, str, float]]] = {}
        self._poll = poll
        self._max_poll = max_poll
        self._token = uuid.uuid4().hex
        # The slots this budget holds, so taking one skips them instead of paying a backend call each.
        self._mine: set[str] = set()
        self._mine_lock = threading.Lock()  # taken and freed from worker threads
        self._numbers = itertools.count()  # next() on it is atomic: crawls on several threads may share a budget

    @contextlib.asynccontextmanager
    async def slot(self, host: str, *, concurrency: int, waiting: Callable[[], int] = lambda: 0) -> AsyncIterator[None]:
        """Hold one of the host's `concurrency` shared slots for the block, waiting for one to free.

        When `waiting()` says more requests of this crawl wait for the host as the block ends than
        slots are already handed over, the slot passes to one of them without a backend call, up to
        `hand_over_for` seconds after it was taken; then it is freed, so other crawls get their
        chance. A handed-over slot whose taker is cancelled first stays held until its TTL.
        """
        host = host.lower()
        held = self._unpark(host)
        if held is None:
            held = await self._wait(functools.partial(self._take_slot, host, concurrency))
        name, owner, _ = held
        async with self._renewed(name, owner):
            try:
                yield
            finally:
                if not self._park(host, held, waiting=waiting()):
                    await self._end(lambda: self._free_slot(name, owner), name)

    @contextlib.asynccontextmanager
    async def turn(self, host: str, *, delay: float) -> AsyncIterator[None]:
        """Hold the host's turn for the block: no crawl sends it another request until `delay` s after.

        The delay counts from the end of the block, not from its start, and is set when the block
        ends: a request that reaches the host late (a slow backend call, a busy machine) cannot
        bring the next one closer than the delay.
        """
        name, owner = turn_lock_name(host.lower()), self._owner()
        await self._wait(functools.partial(self._take, name, owner))
        async with self._renewed(name, owner):
            try:
                yield
            finally:
                # Not released: shortened to the delay, whose end opens the next turn.
                await self._end(lambda: self._locks.renew(name, owner, ttl_seconds=delay), name)

    def _owner(self) -> str:
        # A token unique to each lease taken, so one crawl's leases never end each other.
        return f"{self._token}:{next(self._numbers)}"

    def _take(self, name: str, owner: str) -> bool | None:
        return self._locks.acquire(name, owner, ttl_seconds=self._lease_ttl) or None

    def _unpark(self, host: str) -> tuple[str, str, float] | None:
        with self._mine_lock:
            parked = self._parked.get(host)
            return parked.pop() if parked else None

    def _park(self, host: str, held: tuple[str, str, float], *, waiting: int) -> bool:
        """Hand the slot over if a request waits for one and it is young enough; False when it must be freed."""
        if time.monotonic() - held[2] >= self._hand_over_for:
            return False
        with self._mine_lock:
            parked = self._parked.setdefault(host, [])
            if len(parked) >= waiting:
                return False
            parked.append(held)
            return True

    def _take_slot(self, host: str, concurrency: int) -> tuple[str, str, float] | None:
        # A slot handed over while this waited first; then from a random slot, so crawls waiting on
        # a busy host do not all write to slot 0 first.
        if (parked := self._unpark(host)) is not None:
            return parked
        first = random.randrange(concurrency)
        names = [slot_lock_name(host, (first + index) % concurrency) for index in range(concurrency)]
        with self._mine_lock:
            names = [name for name in names if name not in self._mine]
        owner = self._owner()
        for name in names:
            if self._locks.acquire(name, owner, ttl_seconds=self._lease_ttl):
                with self._mine_lock:
                    self._mine.add(name)
                return name, owner, time.monotonic()
        return None

    def _free_slot(self, name: str, owner: str) -> None:
        with self._mine_lock:
            self._mine.discard(name)
        self._locks.release(name, owner)

    @contextlib.asynccontextmanager
    async def _renewed(self, name: str, owner: str) -> AsyncIterator[None]:
        """Keep a held lease renewed for the block."""
        renewer = asyncio.create_task(self._keep_renewed(name, owner))
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    @staticmethod
    async def _end(end: Callable[[], object], name: str) -> None:
        try:
            await asyncio.to_thread(end)
        except Exception:
            # The page's outcome does not depend on this; the lease's TTL ends it anyway.
            logger.warning("could not end host lease %r; it ends with its TTL", name, exc_info=True)

    async def _wait(self, take: Callable[[], T | None]) -> T:
        delay = self._poll
        while (name := await self._call(take)) is None:
            # Jittered, so crawls polling one host do not fall into step with each other.
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._max_poll)
        return name

    @staticmethod
    async def _call(take: Callable[[], T | None]) -> T | None:
        try:
            return await asyncio.to_thread(take)
        except Exception as exc:
            raise HostBudgetError(
                f"the per-host budget shared by all runs could not be taken from the locks backend: {exc}"
            ) from exc

    async def _keep_renewed(self, name: str, owner: str) -> None:
        """Renew a held lease while its request runs longer than a third of the TTL."""
        while True:
            await asyncio.sleep(self._lease_ttl / 3)
            try:
                renewed = await asyncio.to_thread(self._locks.renew, name, owner, ttl_seconds=self._lease_ttl)
            except Exception:
                logger.warning("renewing host lease %r failed; retrying", name, exc_info=True)
                continue
            if not renewed:
                logger.warning("host lease %r expired while its request ran; the host may see one extra", name)
                return
