"""Revision 0014 on SQLite and PostgreSQL: pipelines made before it keep the launcher's default queue, and it comes
off again without disturbing the table (SQLite keeps AUTOINCREMENT, the revisions below still step down)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from pipelines_dagster.app_db.migrate import alembic_config, current_revision, upgrade
from tests.app_db.test_document_per_pipeline import pipeline_at


def pipeline_columns(engine: sa.Engine) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns("pipelines")}


def autoincrement_kept(engine: sa.Engine) -> bool:
    """SQLite: the table is still the one 0001 made, whose ids are never reused (a rebuild would drop this)."""
    if engine.dialect.name != "sqlite":
        return True
    with engine.connect() as conn:
        made = conn.scalar(sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'pipelines'"))
    return "AUTOINCREMENT" in made


def test_upgrade_keeps_every_pipeline_on_the_default_queue_and_downgrade_takes_the_column_off(
    empty_database: sa.Engine,
):
    _, made = pipeline_at(empty_database, "0013")
    upgrade(empty_database, "0014")
    with empty_database.begin() as conn:
        rows = conn.execute(sa.text("SELECT id, name, worker_queue FROM pipelines")).all()
        assert [tuple(row) for row in rows] == [(made, "made before", None)]
        conn.execute(sa.text("UPDATE pipelines SET worker_queue = 'site-crawls' WHERE id = :id"), {"id": made})
    assert autoincrement_kept(empty_database)

    command.downgrade(alembic_config(empty_database), "0013")
    assert current_revision(empty_database) == "0013"
    assert "worker_queue" not in pipeline_columns(empty_database)
    assert autoincrement_kept(empty_database)
    with empty_database.connect() as conn:
        assert conn.scalar(sa.text("SELECT name FROM pipelines WHERE id = :id"), {"id": made}) == "made before"
    # 0011's downgrade drops max_runtime_seconds with its CHECK: it still can, as the table was not rebuilt.
    command.downgrade(alembic_config(empty_database), "0010")
    assert "max_runtime_seconds" not in pipeline_columns(empty_database)
    upgrade(empty_database)
    assert "worker_queue" in pipeline_columns(empty_database)
