"""The `locks` resource: one interface, backed by Redis or the app database's lease table.

redis is imported when a Redis backend starts, not with the code location that every run loads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import dagster as dg
import sqlalchemy as sa
from pydantic import PrivateAttr

from pipelines_dagster.app_db.engine import create_engine
from pipelines_dagster.core.storage.locks import DatabaseLocks, HeldLock, Locks, RedisLocks

if TYPE_CHECKING:
    import sqlite3

    import redis


class LocksResource(dg.ConfigurableResource["LocksResource"], ABC):
    _locks: Locks | None = PrivateAttr(default=None)

    @abstractmethod
    def _build(self) -> Locks:
        """Open the backend's client and wrap it in its `Locks`."""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._locks = self._build()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self._locks = None

    @property
    def locks(self) -> Locks:
        """The plain locks; built on first use when the resource is used outside a run."""
        if self._locks is None:
            self._locks = self._build()
        return self._locks

    def acquire(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        return self.locks.acquire(name, owner, ttl_seconds=ttl_seconds)

    def release(self, name: str, owner: str) -> bool:
        return self.locks.release(name, owner)

    def renew(self, name: str, owner: str, *, ttl_seconds: float) -> bool:
        return self.locks.renew(name, owner, ttl_seconds=ttl_seconds)

    def is_locked(self, name: str) -> bool:
        return self.locks.is_locked(name)

    def owner_of(self, name: str) -> str | None:
        return self.locks.owner_of(name)

    def hold(
        self, name: str, owner: str, *, ttl_seconds: float, renew_every: float | None = None
    ) -> AbstractContextManager[HeldLock]:
        return self.locks.hold(name, owner, ttl_seconds=ttl_seconds, renew_every=renew_every)


class DatabaseLocksResource(LocksResource):
    """Lease rows in the app database: the embedded default, no extra server."""

    database_url: str

    _engine: sa.Engine | None = PrivateAttr(default=None)

    def _build(self) -> Locks:
        self._engine = create_engine(self.database_url)
        if self._engine.dialect.name == "sqlite":
            sa.event.listen(self._engine, "connect", _lease_commits_unsynced)
        return DatabaseLocks(self._engine)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        super().teardown_after_execution(context)


def _lease_commits_unsynced(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    """No fsync per lease commit on this engine (WAL keeps it atomic): every crawled request takes and
    frees a host slot, and a lease lost to a power cut is lost with its holder, who died in it too."""
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


class RedisLocksResource(LocksResource):
    """Redis keys set with NX and a TTL: for production, where runs span machines."""

    url: str
    key_prefix: str = "pipelines:lock:"

    _client: redis.Redis | None = PrivateAttr(default=None)

    def _build(self) -> Locks:
        import redis

        self._client = redis.Redis.from_url(self.url)
        return RedisLocks(self._client, key_prefix=self.key_prefix)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        super().teardown_after_execution(context)
