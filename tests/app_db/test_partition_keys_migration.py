"""Revision 0013 on SQLite and PostgreSQL: a pipeline made before it keeps its bare id as its partition key (its
Dagster history is under that key), a pipeline made after it gets its id and name, fixed at creation, and no two
pipelines share a key."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.pipelines import (
    PipelineChanges,
    create_pipeline,
    pipeline_partitions,
    runnable_partitions,
    update_pipeline,
)
from tests.app_db.test_document_per_pipeline import pipeline_at


def test_old_pipelines_keep_their_ids_and_new_ones_get_named_keys_that_a_rename_leaves(empty_database: sa.Engine):
    workspace, made_before = pipeline_at(empty_database, "0012")
    upgrade(empty_database)
    sessions = session_factory(empty_database)
    with transaction(sessions) as session:
        connector = create_connector(
            session, workspace_id=workspace, connector_type="webcrawler", urls=["https://example.com/"]
        )
        made_after = create_pipeline(session, workspace_id=workspace, connector_id=connector.id, name="Northwind docs")
        # The key is there before the commit: nothing commits a pipeline without one.
        assert made_after.partition_key == f"{made_after.id}-northwind-docs"
        made_after_id = made_after.id
    with transaction(sessions) as session:
        update_pipeline(
            session, workspace_id=workspace, pipeline_id=made_after_id, changes=PipelineChanges(name="Renamed")
        )
    with sessions() as session:
        assert session.get_one(Pipeline, made_before).partition == str(made_before)
        assert session.get_one(Pipeline, made_after_id).name == "Renamed"
        keys = {made_before: str(made_before), made_after_id: f"{made_after_id}-northwind-docs"}
        assert pipeline_partitions(session, [made_before, made_after_id, 999_999]) == keys
        # The old row has no connector: it cannot run, so it is no partition.
        assert runnable_partitions(session) == {made_after_id: keys[made_after_id]}

    with pytest.raises(sa.exc.IntegrityError, match=r"ix_pipelines_partition_key|UNIQUE"), empty_database.begin() as c:
        c.execute(
            sa.text("UPDATE pipelines SET partition_key = :key WHERE id = :id"),
            {"key": keys[made_after_id], "id": made_before},
        )
