"""Revision 0011: pipelines made before it keep the deployment's maximum runtime; a non-positive one is refused."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.migrate import upgrade
from tests.app_db.test_document_per_pipeline import pipeline_at


def test_upgrade_keeps_every_pipeline_on_the_deployments_max_runtime(empty_database: sa.Engine):
    _, made = pipeline_at(empty_database, "0010")
    upgrade(empty_database, "0011")
    with empty_database.begin() as conn:
        rows = conn.execute(sa.text("SELECT id, name, max_runtime_seconds FROM pipelines")).all()
        assert [tuple(row) for row in rows] == [(made, "made before", None)]
        conn.execute(sa.text("UPDATE pipelines SET max_runtime_seconds = 3600 WHERE id = :id"), {"id": made})
    with pytest.raises(sa.exc.IntegrityError, match="max_runtime_positive"), empty_database.begin() as conn:
        conn.execute(sa.text("UPDATE pipelines SET max_runtime_seconds = 0 WHERE id = :id"), {"id": made})
    with empty_database.connect() as conn:
        assert conn.execute(sa.text("SELECT max_runtime_seconds FROM pipelines")).scalar_one() == 3600
