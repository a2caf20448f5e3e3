"""The `locks` resource inside a real materialization, on Redis and on the lease table."""

from __future__ import annotations

import uuid

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.core.storage.locks import LockHeldError
from pipelines_dagster.resources.locks import DatabaseLocksResource, LocksResource, RedisLocksResource


def guarded_asset(name: str) -> dg.AssetsDefinition:
    # Dagster compares the context annotation as an object, and `from __future__ import
    # annotations` turns it into a string it rejects, so `context` stays unannotated.
    @dg.asset
    def guarded(context, locks: LocksResource) -> dg.MaterializeResult:
        with locks.hold(name, context.run.run_id, ttl_seconds=5) as held:
            owner = locks.owner_of(name)
            rival_acquired = locks.acquire(name, "rival", ttl_seconds=5)
            rival_released = locks.release(name, "rival")
            rival_renewed = locks.renew(name, "rival", ttl_seconds=5)
        return dg.MaterializeResult(
            metadata={
                "owner": owner,
                "rival_acquired": rival_acquired,
                "rival_released": rival_released,
                "rival_renewed": rival_renewed,
                "lost": held.lost.is_set(),
                "locked_after": locks.is_locked(name),
            }
        )

    return guarded


def assert_resource_locks(resource: LocksResource) -> None:
    name = f"test:{uuid.uuid4().hex}"
    result = dg.materialize([guarded_asset(name)], resources={"locks": resource})

    assert result.success
    [materialization] = result.asset_materializations_for_node("guarded")
    metadata = {key: value.value for key, value in materialization.metadata.items()}
    assert metadata == {
        "owner": result.run_id,
        "rival_acquired": False,
        "rival_released": False,
        "rival_renewed": False,
        "lost": False,
        "locked_after": False,
    }

    # Outside a run the backend is built on first use.
    assert resource.acquire(name, "cli", ttl_seconds=5)
    assert resource.owner_of(name) == "cli"
    with pytest.raises(LockHeldError), resource.hold(name, "other", ttl_seconds=5):
        pass
    assert resource.release(name, "cli")
    assert not resource.is_locked(name)
    resource.teardown_after_execution(dg.build_init_resource_context())


@pytest.mark.integration
def test_redis_locks_resource(redis_url: str) -> None:
    assert_resource_locks(RedisLocksResource(url=redis_url, key_prefix=f"pipelines-test:{uuid.uuid4().hex}:"))


@pytest.mark.integration
def test_database_locks_resource(app_engine: sa.Engine) -> None:
    assert_resource_locks(DatabaseLocksResource(database_url=app_engine.url.render_as_string(hide_password=False)))
