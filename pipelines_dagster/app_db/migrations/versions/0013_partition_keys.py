"""partition keys: a pipeline's Dagster partition key is stored with it, and a new pipeline's carries its name

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

A pipeline created from now on gets the key `<id>-<name as a slug>` (`17-northwind-docs`), so the Dagster
UI's partition pickers say which pipeline each key is. Every pipeline that exists already keeps its bare
id as its key (the column stays NULL for it): Dagster keeps each partition's runs, materializations,
check results and health under its key, in Dagster's own storage, so giving an existing pipeline a new
key would show it as never materialized and split its history across two keys.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


# A unique index, not a constraint: so SQLite adds and drops the column in place, without rebuilding the table
# (batch mode), which would lose its AUTOINCREMENT (letting a deleted pipeline's id come back) and turn the
# column CHECK of max_runtime_seconds into a table CHECK that 0011's downgrade cannot drop.
INDEX = "ix_pipelines_partition_key"


def upgrade() -> None:
    op.add_column("pipelines", sa.Column("partition_key", sa.String(64), nullable=True))
    op.create_index(INDEX, "pipelines", ["partition_key"], unique=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="pipelines")
    op.drop_column("pipelines", "partition_key")
