"""A pipeline's partition and its row, on a real Dagster instance and both app databases: a creation
killed before its commit leaves neither, and a partition left without its pipeline (the order services.py
used to have, partition first) is removed by one partition-sync tick, never one whose pipeline just committed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._serdes import serialize_value

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.pipelines import runnable_partitions
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.partitions import PARTITIONS_NAME
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.partitions import pipeline_partitions_sync
from tests.sensors.test_trigger_sensors import app_db, evaluate, instance  # noqa: F401  (fixtures)
from tests.support.processes import kill_when_it_says

REPO_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace_id(app_db: AppDatabaseResource) -> int:
    with transaction(app_db.sessions) as session:
        return create_workspace(session, name="acme", owner_user_id="u").workspace.id


@pytest.fixture
def connector_id(app_db: AppDatabaseResource, workspace_id: int) -> int:
    """A web connector: only a pipeline that can run (enabled, with one) has a partition."""
    with transaction(app_db.sessions) as session:
        return create_connector(
            session, workspace_id=workspace_id, connector_type="webcrawler", urls=["https://example.com/"]
        ).id


def partitions(instance: dg.DagsterInstance) -> set[str]:
    return set(instance.get_dynamic_partitions(PARTITIONS_NAME))


def pipelines_of(app_db: AppDatabaseResource, workspace_id: int) -> set[str]:
    """The partition keys of the workspace's pipelines."""
    with app_db.sessions() as session:
        return {
            pipeline.partition for pipeline in session.scalars(sa.select(Pipeline).filter_by(workspace_id=workspace_id))
        }


def kill_a_creation_before_its_commit(order: str, instance, app_db, workspace_id: int, log: Path) -> None:
    env = os.environ | {"KILLED_CREATE_INSTANCE_REF": serialize_value(instance.get_ref())}
    command = [sys.executable, "-m", "tests.sensors.killed_create", order, app_db.url, str(workspace_id), "doomed"]
    kill_when_it_says(command, b"uncommitted\n", env=env, cwd=REPO_DIR, log=log)


def changes(result: dg.SensorResult) -> dict[type, set[str]]:
    return {type(request): set(request.partition_keys) for request in result.dynamic_partitions_requests}


def test_a_creation_killed_before_its_commit_leaves_neither_pipeline_nor_partition(
    instance, app_db, workspace_id, tmp_path
):
    kill_a_creation_before_its_commit("services", instance, app_db, workspace_id, tmp_path / "create.log")
    assert pipelines_of(app_db, workspace_id) == set()
    assert partitions(instance) == set()


def test_a_partition_left_by_a_creation_killed_before_its_commit_goes_in_one_sync_tick(
    instance, app_db, workspace_id, tmp_path
):
    kill_a_creation_before_its_commit("partition-first", instance, app_db, workspace_id, tmp_path / "create.log")
    [orphan] = partitions(instance)
    assert pipelines_of(app_db, workspace_id) == set()
    assert changes(evaluate(pipeline_partitions_sync, instance, app_db)).get(dg.DeleteDynamicPartitionsRequest) == {
        orphan
    }


def test_a_pipeline_gets_its_partition_when_it_commits_and_loses_it_when_its_deletion_commits(
    instance, app_db, workspace_id, connector_id
):
    with transaction(app_db.sessions) as session:
        made = services.create_pipeline(
            session, instance, workspace_id=workspace_id, connector_id=connector_id, name="made"
        )
        made_id, key = made.id, made.partition
        assert partitions(instance) == set()
    assert partitions(instance) == {key} == {f"{made_id}-made"}
    with pytest.raises(RuntimeError), transaction(app_db.sessions) as session:
        services.create_pipeline(session, instance, workspace_id=workspace_id, connector_id=connector_id, name="undone")
        raise RuntimeError("the request failed before its commit")
    assert partitions(instance) == {key} == pipelines_of(app_db, workspace_id)
    with transaction(app_db.sessions) as session:
        services.delete_pipeline(session, instance, workspace_id=workspace_id, pipeline_id=made_id)
        assert partitions(instance) == {key}
    assert partitions(instance) == set()


def test_a_pipeline_committed_between_the_sync_ticks_two_reads_keeps_its_partition(
    instance, app_db, workspace_id, connector_id, monkeypatch
):
    with transaction(app_db.sessions) as session:
        services.create_pipeline(session, instance, workspace_id=workspace_id, connector_id=connector_id, name="before")
    committed: list[int] = []

    def a_pipeline_commits() -> None:
        if not committed:
            with transaction(app_db.sessions) as session:
                made = services.create_pipeline(
                    session, instance, workspace_id=workspace_id, connector_id=connector_id, name="meanwhile"
                )
            committed.append(made.id)

    # Whichever of the tick's two reads comes first, the pipeline and its partition commit just after it.
    read_partitions = instance.get_dynamic_partitions

    def partitions_read(name: str) -> list[str]:
        keys = read_partitions(name)
        a_pipeline_commits()
        return keys

    def rows_read(session) -> dict[int, str]:
        keys = runnable_partitions(session)
        a_pipeline_commits()
        return keys

    monkeypatch.setattr(instance, "get_dynamic_partitions", partitions_read)
    monkeypatch.setattr("pipelines_dagster.sensors.partitions.runnable_partitions", rows_read)
    result = changes(evaluate(pipeline_partitions_sync, instance, app_db))
    monkeypatch.undo()
    assert partitions(instance) == pipelines_of(app_db, workspace_id) and len(committed) == 1
    assert not partitions(instance) & result.get(dg.DeleteDynamicPartitionsRequest, set())
