"""A run's hold on its locks: taken, waited for while another live run has them, taken over from a
run that has ended, and renewed while the crawl lasts."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from pipelines_dagster.core.storage.locks import HeldLock, LockHeldError, Locks

# How often a crawl renews its locks, so it notices one lost (expired, deleted, a Redis restarted empty)
# within this long and stops; the TTL only bounds how long a dead process's lock outlives it.
LOCK_RENEW_SECONDS = 10.0

# How often a crawl waiting for a lock another run holds asks for it again.
_LOCK_POLL_SECONDS = 1.0


class OwnerState(enum.Enum):
    """What the orchestrator says of a lock's owner (a run id)."""

    RUNNING = "running"
    """Queued or in progress: the lock is its own."""
    ENDED = "ended"
    """Ended: a lock it still owns was left by its dead process."""
    UNKNOWN = "unknown"
    """Not a run the orchestrator knows."""


OwnerStates = Callable[[str], OwnerState]


@dataclass(frozen=True, kw_only=True)
class LockWait:
    """How a crawl meets a lock another run holds: it waits up to `seconds` while that run is in
    progress (0: refused at once); `waiting(owner)` is told once when it starts to wait."""

    seconds: float = 0.0
    waiting: Callable[[str], None] | None = None


NO_LOCK_WAIT = LockWait()


def take_lock(
    held: ExitStack,
    locks: Locks,
    name: str,
    run_id: str,
    *,
    ttl_seconds: float,
    owners: OwnerStates | None,
    wait: LockWait,
) -> HeldLock:
    """Hold `name` for the run until `held` closes; LockHeldError while a live owner has it.

    A lock still owned by a run that has ended was left by a run whose process died. The
    lock-release sensor frees it on its next tick, but a run started before that (a user's
    relaunch, the instance's retry of the dead run) would be refused while nothing runs. A lock
    the run owns itself is its own earlier attempt's, whose release failed (an outage of the locks'
    backend, which failed that attempt too): the run's retry takes it again. A lock a run in
    progress holds is waited for, within `wait`: the run queue cannot hold a run back behind a
    batch run that covers its pipeline, so two can start together, and the later one crawls after.
    """

    def hold() -> HeldLock:
        return held.enter_context(
            locks.hold(name, run_id, ttl_seconds=ttl_seconds, renew_every=min(LOCK_RENEW_SECONDS, ttl_seconds / 3))
        )

    deadline = time.monotonic() + wait.seconds
    told = False
    while True:
        try:
            return hold()
        except LockHeldError:
            owner = locks.owner_of(name)
            if owner is None and time.monotonic() < deadline:
                continue  # freed between the two calls
            state = owners(owner) if owners is not None and owner is not None else OwnerState.UNKNOWN
            if owner is not None and (owner == run_id or state is OwnerState.ENDED):
                break
            if state is not OwnerState.RUNNING or time.monotonic() >= deadline:
                raise
            if not told and wait.waiting is not None and owner is not None:
                wait.waiting(owner)
                told = True
            time.sleep(min(_LOCK_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    # Frees it only while that owner still has it: if another run took it in the meantime,
    # the hold below is refused as it should be.
    locks.release(name, owner)
    return hold()
