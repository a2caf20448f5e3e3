"""Catalog changes that Dagster must see at once: a pipeline's partition comes and goes with its being runnable.

The CLI and the HTTP API both go through these, inside the caller's transaction; the partition
is added or removed once that transaction commits, so a failure or a kill before the commit leaves
no partition without its pipeline. A kill just after the commit leaves Dagster behind the catalog,
and the partition sync sensor catches up on its next tick. Only runnable pipelines (enabled, with a
connector that has an executor) are partitions: see partitions.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

import dagster as dg
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import after_commit
from pipelines_dagster.app_db.models import Connector, Pipeline
from pipelines_dagster.core.catalog import connectors, pipelines, workspaces
from pipelines_dagster.core.catalog.seeding import SeedReport, seed_templates
from pipelines_dagster.partitions import remove_pipeline_partitions, set_pipeline_partitions


def follow_pipelines(session: Session, instance: dg.DagsterInstance, pipeline_ids: Iterable[int]) -> None:
    """Once the transaction commits, the runnable ones of these pipelines have partitions and the others none,
    as the transaction leaves them."""
    ids = set(pipeline_ids)
    if not ids:
        return
    session.flush()
    keys = pipelines.pipeline_partitions(session, ids)
    runnable = pipelines.runnable_partitions(session, ids)
    not_runnable = [key for pipeline_id, key in keys.items() if pipeline_id not in runnable]
    after_commit(
        session, partial(set_pipeline_partitions, instance, runnable=runnable.values(), not_runnable=not_runnable)
    )


def create_workspace(
    session: Session, instance: dg.DagsterInstance, *, name: str, owner_user_id: str
) -> workspaces.NewWorkspace:
    """A new workspace, with the built-in templates seeded into it."""
    created = workspaces.create_workspace(session, name=name, owner_user_id=owner_user_id)
    seed_workspace(session, instance, created.workspace.id)
    return created


def seed_workspace(session: Session, instance: dg.DagsterInstance, workspace_id: int) -> SeedReport:
    """The built-in templates the workspace lacks (seeded disabled: partitions once they can run)."""
    report = seed_templates(session, workspace_id)
    follow_pipelines(session, instance, report.created)
    return report


def create_connector(session: Session, instance: dg.DagsterInstance, **fields: Any) -> Connector:
    connector = connectors.create_connector(session, **fields)
    system_pipelines = session.scalars(sa.select(Pipeline.id).where(Pipeline.connector_id == connector.id))
    follow_pipelines(session, instance, system_pipelines)
    return connector


def create_pipeline(session: Session, instance: dg.DagsterInstance, **fields: Any) -> Pipeline:
    pipeline = pipelines.create_pipeline(session, **fields)
    follow_pipelines(session, instance, [pipeline.id])
    return pipeline


def update_pipeline(session: Session, instance: dg.DagsterInstance, **fields: Any) -> Pipeline:
    """`pipelines.update_pipeline`; the pipeline gains its partition when it becomes runnable (a template
    given a connector and enabled) and loses it when it stops being so (disabled)."""
    pipeline = pipelines.update_pipeline(session, **fields)
    follow_pipelines(session, instance, [pipeline.id])
    return pipeline


def set_pipeline_enabled(session: Session, instance: dg.DagsterInstance, **fields: Any) -> Pipeline:
    pipeline = pipelines.set_pipeline_enabled(session, **fields)
    follow_pipelines(session, instance, [pipeline.id])
    return pipeline


def delete_pipeline(session: Session, instance: dg.DagsterInstance, *, workspace_id: int, pipeline_id: int) -> None:
    keys = pipelines.pipeline_partitions(session, [pipeline_id])
    pipelines.delete_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    after_commit(session, partial(remove_pipeline_partitions, instance, list(keys.values())))


def delete_connector(session: Session, instance: dg.DagsterInstance, *, workspace_id: int, connector_id: int) -> None:
    """A connector with its own periodic indexing pipelines, whose partitions go with them."""
    keys = pipelines.pipeline_partitions(
        session, session.scalars(sa.select(Pipeline.id).where(Pipeline.connector_id == connector_id))
    )
    removed = connectors.delete_connector(session, workspace_id=workspace_id, connector_id=connector_id)
    if removed:
        after_commit(
            session, partial(remove_pipeline_partitions, instance, [keys[pipeline_id] for pipeline_id in removed])
        )
