"""Revision 0010: pipelines made before manual triggers gated run-now get one, on; one already there is kept."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import PipelineTrigger
from tests.app_db.test_document_per_pipeline import insert, old_pipeline


def test_upgrade_gives_each_pipeline_without_a_manual_trigger_one_that_is_on(empty_database: sa.Engine):
    upgrade(empty_database, "0009")
    with empty_database.begin() as conn:
        workspace = insert(conn, "workspaces", name="acme", owner_user_id="u", created_at="2026-11-01")
        bare, switched_off = old_pipeline(conn, workspace, "bare"), old_pipeline(conn, workspace, "off")
        insert(
            conn,
            "pipeline_triggers",
            workspace_id=workspace,
            pipeline_id=switched_off,
            kind="manual",
            enabled=False,
            created_at="2026-11-01",
            updated_at="2026-11-01",
        )

    upgrade(empty_database, "0010")
    with session_factory(empty_database)() as session:
        manual = session.scalars(sa.select(PipelineTrigger).where(PipelineTrigger.kind == "manual")).all()
        assert sorted((t.pipeline_id, t.enabled) for t in manual) == [(bare, True), (switched_off, False)]
        added = next(t for t in manual if t.pipeline_id == bare)
        assert added.workspace_id == workspace and isinstance(added.created_at, datetime)
    upgrade(empty_database, "0010")  # a second upgrade to the same revision adds nothing
    with session_factory(empty_database)() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(PipelineTrigger)) == 2
