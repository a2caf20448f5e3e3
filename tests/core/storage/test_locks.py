"""Locks on real Redis and on the lease table (SQLite, PostgreSQL): one contract, both backends."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import create_engine
from pipelines_dagster.core.storage.locks import (
    DatabaseLocks,
    LockHeldError,
    Locks,
    RedisLocks,
    connector_lock_name,
    pipeline_lock_name,
)
from tests.support.redis_server import OwnRedis, own_redis  # noqa: F401  (fixture)

CONTENDERS = 8


def race(locks: Locks, name: str) -> list[bool]:
    """Every contender calls acquire at the same instant, each on its own thread and connection."""
    start = threading.Barrier(CONTENDERS)

    def attempt(index: int) -> bool:
        start.wait()
        return locks.acquire(name, f"contender-{index}", ttl_seconds=30)

    with ThreadPoolExecutor(CONTENDERS) as pool:
        return list(pool.map(attempt, range(CONTENDERS)))


def test_lock_names() -> None:
    assert pipeline_lock_name(7) == "pipeline:7"
    assert connector_lock_name(3) == "connector:3"


def test_lock_held_error_names_the_lock() -> None:
    error = LockHeldError("pipeline:7")
    assert error.name == "pipeline:7"
    assert "'pipeline:7' is held by another run" in str(error)


class LocksContract:
    """What every backend guarantees; subclasses provide `locks` and `advance` (let time pass)."""

    @pytest.fixture
    def name(self) -> str:
        # The PostgreSQL database lives for the whole session, so names must not repeat.
        return f"test:{uuid.uuid4().hex}"

    def test_second_acquirer_fails_while_held(self, locks: Locks, name: str) -> None:
        assert locks.acquire(name, "one", ttl_seconds=5)
        assert not locks.acquire(name, "two", ttl_seconds=5)
        assert not locks.acquire(name, "one", ttl_seconds=5)
        assert locks.is_locked(name)
        assert locks.owner_of(name) == "one"

    def test_free_lock(self, locks: Locks, name: str) -> None:
        assert not locks.is_locked(name)
        assert locks.owner_of(name) is None
        assert not locks.release(name, "one")
        assert not locks.renew(name, "one", ttl_seconds=5)

    def test_only_the_owner_releases(self, locks: Locks, name: str) -> None:
        assert locks.acquire(name, "one", ttl_seconds=5)
        assert not locks.release(name, "two")
        assert locks.owner_of(name) == "one"
        assert locks.release(name, "one")
        assert not locks.is_locked(name)
        assert locks.acquire(name, "two", ttl_seconds=5)

    def test_only_the_owner_renews(self, locks: Locks, name: str, advance) -> None:
        assert locks.acquire(name, "one", ttl_seconds=0.2)
        assert not locks.renew(name, "two", ttl_seconds=5)
        advance(0.3)
        assert not locks.is_locked(name)

    def test_expired_lock_goes_to_another_owner(self, locks: Locks, name: str, advance) -> None:
        assert locks.acquire(name, "one", ttl_seconds=0.2)
        advance(0.3)
        assert not locks.is_locked(name)
        assert locks.owner_of(name) is None
        assert locks.acquire(name, "two", ttl_seconds=5)
        assert locks.owner_of(name) == "two"
        assert not locks.release(name, "one")
        assert locks.owner_of(name) == "two"

    def test_renew_extends_the_life(self, locks: Locks, name: str, advance) -> None:
        assert locks.acquire(name, "one", ttl_seconds=0.2)
        assert locks.renew(name, "one", ttl_seconds=5)
        advance(0.4)
        assert locks.owner_of(name) == "one"

    def test_expired_lock_is_not_revived(self, locks: Locks, name: str, advance) -> None:
        assert locks.acquire(name, "one", ttl_seconds=0.2)
        advance(0.3)
        assert not locks.renew(name, "one", ttl_seconds=5)
        assert not locks.is_locked(name)

    def test_concurrent_acquire_has_one_winner(self, locks: Locks, name: str) -> None:
        for round_ in range(5):
            results = race(locks, f"{name}:{round_}")
            assert results.count(True) == 1, results

    def test_concurrent_takeover_of_expired_lock_has_one_winner(self, locks: Locks, name: str, advance) -> None:
        for round_ in range(5):
            assert locks.acquire(f"{name}:{round_}", "stale", ttl_seconds=0.2)
        advance(0.3)
        for round_ in range(5):
            results = race(locks, f"{name}:{round_}")
            assert results.count(True) == 1, results

    def test_hold_renews_past_the_ttl_and_releases_on_exit(self, locks: Locks, name: str) -> None:
        with locks.hold(name, "one", ttl_seconds=0.6) as held:
            time.sleep(1.5)
            assert not locks.acquire(name, "two", ttl_seconds=5)
            assert locks.owner_of(name) == "one"
            assert not held.lost.is_set()
        assert not locks.is_locked(name)
        assert locks.acquire(name, "two", ttl_seconds=5)

    def test_hold_refuses_a_held_lock(self, locks: Locks, name: str) -> None:
        assert locks.acquire(name, "other", ttl_seconds=5)
        with pytest.raises(LockHeldError, match=name), locks.hold(name, "one", ttl_seconds=5):
            pytest.fail("the block ran without the lock")
        assert locks.owner_of(name) == "other"

    def test_hold_releases_when_the_block_raises(self, locks: Locks, name: str) -> None:
        with pytest.raises(ValueError, match="boom"), locks.hold(name, "one", ttl_seconds=5):
            raise ValueError("boom")
        assert not locks.is_locked(name)

    def test_hold_reports_a_lost_lock_and_leaves_the_new_owner_alone(self, locks: Locks, name: str) -> None:
        with locks.hold(name, "one", ttl_seconds=5, renew_every=0.05) as held:
            # What an expiry during a long stall looks like: the lease is gone and retaken.
            assert locks.release(name, "one")
            assert locks.acquire(name, "two", ttl_seconds=5)
            assert held.lost.wait(2)
        assert locks.owner_of(name) == "two"

    def test_hold_rejects_a_renewal_interval_not_shorter_than_the_ttl(self, locks: Locks, name: str) -> None:
        with pytest.raises(ValueError, match="renew_every"), locks.hold(name, "one", ttl_seconds=1, renew_every=1):
            pytest.fail("the block ran")
        assert not locks.is_locked(name)

    def test_ttl_must_be_positive(self, locks: Locks, name: str) -> None:
        with pytest.raises(ValueError, match="ttl_seconds"):
            locks.acquire(name, "one", ttl_seconds=0)
        assert not locks.is_locked(name)


@pytest.mark.integration
class TestRedisLocks(LocksContract):
    @pytest.fixture
    def prefix(self) -> str:
        return f"pipelines-test:{uuid.uuid4().hex}:"

    @pytest.fixture
    def client(self, redis_url: str, prefix: str) -> Iterator[redis.Redis]:
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        yield client
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()

    @pytest.fixture
    def locks(self, redis_url: str, prefix: str, client: redis.Redis) -> Iterator[RedisLocks]:
        # Bytes responses here; the inspecting `client` decodes, so both reply types are covered.
        raw = redis.Redis.from_url(redis_url)
        yield RedisLocks(raw, key_prefix=prefix)
        raw.close()

    @pytest.fixture
    def advance(self) -> Callable[[float], None]:
        return time.sleep

    def test_key_carries_prefix_owner_and_ttl(
        self, locks: RedisLocks, client: redis.Redis, prefix: str, name: str
    ) -> None:
        assert locks.acquire(name, "one", ttl_seconds=5)
        assert client.get(prefix + name) == "one"
        assert 0 < client.pttl(prefix + name) <= 5000
        assert RedisLocks(client, key_prefix=prefix).owner_of(name) == "one"


class OffsetClock:
    """Wall time plus a jump the test controls: no sleeping for expiry, renewals still tick."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.mark.integration
class TestDatabaseLocks(LocksContract):
    @pytest.fixture
    def clock(self) -> OffsetClock:
        return OffsetClock()

    @pytest.fixture
    def locks(self, app_engine: sa.Engine, clock: OffsetClock) -> DatabaseLocks:
        return DatabaseLocks(app_engine, clock=clock)

    @pytest.fixture
    def advance(self, clock: OffsetClock) -> Callable[[float], None]:
        return clock.advance

    def test_expired_lease_row_is_taken_over_in_place(
        self, locks: DatabaseLocks, app_engine: sa.Engine, name: str, clock: OffsetClock
    ) -> None:
        assert locks.acquire(name, "one", ttl_seconds=1)
        clock.advance(2)
        assert locks.acquire(name, "two", ttl_seconds=1)
        with app_engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT owner FROM lock_leases WHERE name = :name"), {"name": name}).all()
        assert [row.owner for row in rows] == ["two"]

    def test_separate_engines_see_one_lease(
        self, locks: DatabaseLocks, app_engine: sa.Engine, name: str, clock: OffsetClock
    ) -> None:
        # Another process would bring its own engine and connection pool.
        other_engine = create_engine(app_engine.url.render_as_string(hide_password=False))
        try:
            other = DatabaseLocks(other_engine, clock=clock)
            assert locks.acquire(name, "one", ttl_seconds=5)
            assert not other.acquire(name, "two", ttl_seconds=5)
            assert other.owner_of(name) == "one"
        finally:
            other_engine.dispose()


def test_a_lock_whose_backend_stays_out_of_reach_for_its_ttl_is_reported_lost(own_redis: OwnRedis) -> None:
    """Renewal failing by error (not by a refusal) is retried, but not past the TTL: by then the lease has
    run out on the server, whatever it says once it answers again."""
    client = redis.Redis.from_url(own_redis.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    locks = RedisLocks(client)
    with locks.hold("pipeline:1", "run-1", ttl_seconds=1.5, renew_every=0.2) as held:
        own_redis.stop()
        assert not held.lost.wait(0.8), "lost before the TTL had passed"
        assert held.lost.wait(3)
    client.close()
