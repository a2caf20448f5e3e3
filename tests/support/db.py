"""App-database helpers shared by tests."""

from __future__ import annotations

import sqlalchemy as sa

from pipelines_dagster.app_db.models import Base


def row_counts(engine: sa.Engine) -> dict[str, int]:
    """Rows per table: compared before and after a refused change to show nothing was written."""
    with engine.connect() as conn:
        return {
            table.name: conn.scalar(sa.select(sa.func.count()).select_from(table))
            for table in Base.metadata.sorted_tables
        }
