"""Named, owner-token locks with a TTL, over Redis or the app database's lease table.

Only the owner token releases or renews a lock, and an expired lock is free for anyone.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import dialect_insert
from pipelines_dagster.app_db.models import LockLease

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)


class LockHeldError(RuntimeError):
    """Another owner holds the lock."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The lock {name!r} is held by another run; wait for that run to finish"
            " (or for the lock to expire) and try again."
        )
        self.name = name


def pipeline_lock_name(pipeline_id: int) -> str:
    return f"pipeline:{pipeline_id}"


def connector_lock_name(connector_id: int) -> str:
    return f"connector:{connector_id}"


def _ttl_ms(ttl_seconds: float) -> int:
    if ttl_seconds <= 0:
        raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds}")
    # Redis rejects PX 0, and a sub-millisecond TTL should still mean "held briefly".
    return max(1, round(ttl_seconds * 1000))


@dataclass(frozen=True)
class HeldLock:
    """A lock taken by `Locks.hold`.

    `lost` is set once a renewal finds the lock no longer ours; work it guards
    should stop, since another owner may now hold the lock.
    """

    name: str
    owner: str
    lost: threading.Event = field(default_factory=threading.Event, compare=False)


class Locks(ABC):
    @abstractmethod
    def acquire(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        """Take the lock for `owner` unless someone holds it; True when taken."""

    @abstractmethod
    def release(self, name: str, owner: str) -> bool:
        """Free the lock if `owner` holds it; True when freed."""

    @abstractmethod
    def renew(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        """Give `owner`'s still-live lock a fresh TTL; an expired lock stays expired."""

    @abstractmethod
    def owner_of(self, name: str) -> str | None:
        """The owner of the live lock, or None when it is free or expired."""

    def is_locked(self, name: str) -> bool:
        return self.owner_of(name) is not None

    @contextmanager
    def hold(
        self, name: str, owner: str, *, ttl_seconds: float, renew_every: float | None = None
    ) -> Iterator[HeldLock]:
        """Hold the lock for the block, renewing it in the background, and release it after.

        Raises LockHeldError when another owner holds it. The TTL bounds how long
        the lock outlives a process that dies inside the block.
        """
        interval = ttl_seconds / 3 if renew_every is None else renew_every
        if not 0 < interval < ttl_seconds:
            raise ValueError(
                f"renew_every must be positive and shorter than ttl_seconds ({ttl_seconds}), got {interval}"
            )
        if not self.acquire(name, owner, ttl_seconds=ttl_seconds):
            raise LockHeldError(name)
        held = HeldLock(name, owner)
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._keep_renewed,
            args=(held, ttl_seconds, interval, stop),
            name=f"lock-renewal:{name}",
            daemon=True,
        )
        renewer.start()
        try:
            yield held
        finally:
            stop.set()
            renewer.join()
            try:
                self.release(name, owner)
            except Exception:
                # Raising here would hide the block's own outcome; the TTL frees the lock anyway.
                logger.warning("could not release lock %r; it expires with its TTL", name, exc_info=True)

    def _keep_renewed(self, held: HeldLock, ttl_seconds: float, interval: float, stop: threading.Event) -> None:
        renewed_at = time.monotonic()
        while not stop.wait(interval):
            try:
                renewed = self.renew(held.name, held.owner, ttl_seconds=ttl_seconds)
            except Exception:
                # A blip is retried next tick; once the backend has been out of reach for a whole TTL the
                # lease has run out there, whatever it says when it is back.
                if time.monotonic() - renewed_at < ttl_seconds:
                    logger.warning("renewing lock %r failed; retrying", held.name, exc_info=True)
                    continue
                renewed = False
            if not renewed:
                logger.warning("lock %r was lost: it expired or another owner took it", held.name)
                held.lost.set()
                return
            renewed_at = time.monotonic()


_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_RENEW_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


class RedisLocks(Locks):
    """One key per lock holding the owner token; Redis expires it with the TTL."""

    def __init__(self, client: redis.Redis, *, key_prefix: str = "pipelines:lock:") -> None:
        self._client = client
        self._key_prefix = key_prefix
        # Compare-then-act must be one atomic step, or the lock could change hands in between.
        self._release = client.register_script(_RELEASE_SCRIPT)
        self._renew = client.register_script(_RENEW_SCRIPT)

    def _key(self, name: str) -> str:
        return self._key_prefix + name

    def acquire(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        return bool(self._client.set(self._key(name), owner, nx=True, px=_ttl_ms(ttl_seconds)))

    def release(self, name: str, owner: str) -> bool:
        return bool(self._release(keys=[self._key(name)], args=[owner]) == 1)

    def renew(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        return bool(self._renew(keys=[self._key(name)], args=[owner, _ttl_ms(ttl_seconds)]) == 1)

    def owner_of(self, name: str) -> str | None:
        value = self._client.get(self._key(name))
        return value.decode() if isinstance(value, bytes) else value


class DatabaseLocks(Locks):
    """Lease rows in the app database's `lock_leases` table: locks without a Redis server.

    Expiry compares epoch milliseconds from `clock`, so hosts sharing the table
    need synchronised clocks. Each call is its own short transaction.
    """

    def __init__(self, engine: sa.Engine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    def _now_ms(self) -> int:
        return round(self._clock() * 1000)

    def acquire(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        now = self._now_ms()
        insert = dialect_insert(self._engine, LockLease).values(
            name=name, owner=owner, expires_at_ms=now + _ttl_ms(ttl_seconds)
        )
        # One statement, so two acquirers cannot both see the lock free: the loser's
        # insert conflicts, and its update finds a live lease and writes nothing.
        upsert = insert.on_conflict_do_update(
            index_elements=[LockLease.name],
            set_={"owner": insert.excluded.owner, "expires_at_ms": insert.excluded.expires_at_ms},
            where=LockLease.expires_at_ms <= now,
        ).returning(LockLease.name)
        with self._engine.begin() as conn:
            return conn.execute(upsert).first() is not None

    def release(self, name: str, owner: str) -> bool:
        delete = sa.delete(LockLease).where(LockLease.name == name, LockLease.owner == owner)
        with self._engine.begin() as conn:
            return conn.execute(delete).rowcount == 1

    def renew(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        now = self._now_ms()
        update = (
            sa.update(LockLease)
            .where(
                LockLease.name == name,
                LockLease.owner == owner,
                LockLease.expires_at_ms > now,
            )
            .values(expires_at_ms=now + _ttl_ms(ttl_seconds))
        )
        with self._engine.begin() as conn:
            return conn.execute(update).rowcount == 1

    def owner_of(self, name: str) -> str | None:
        query = sa.select(LockLease.owner).where(LockLease.name == name, LockLease.expires_at_ms > self._now_ms())
        with self._engine.connect() as conn:
            return conn.scalar(query)
