"""awaiting runs: what a trigger sensor took for a run that no tick has seen in Dagster yet

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

A tick that dies between committing its marks and returning its run requests leaves rows taken
with no run; these columns let a later tick find them and offer them again. Rows taken before
this revision are left as not awaiting: their runs were requested long ago.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

AWAITING = sa.text("awaiting_run")
AWAITING_FIRE = sa.text("awaiting_run_for IS NOT NULL")


def upgrade() -> None:
    op.add_column("pipeline_triggers", sa.Column("awaiting_run_for", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_pipeline_triggers_awaiting_run",
        "pipeline_triggers",
        ["id"],
        sqlite_where=AWAITING_FIRE,
        postgresql_where=AWAITING_FIRE,
    )
    for table in ("webhook_deliveries", "domain_events"):
        op.add_column(table, sa.Column("awaiting_run", sa.Boolean(), nullable=False, server_default=sa.false()))
        op.create_index(f"ix_{table}_awaiting_run", table, ["id"], sqlite_where=AWAITING, postgresql_where=AWAITING)


def downgrade() -> None:
    # Plain ALTERs, as 0003's downgrade: no batch table rebuild on SQLite.
    for table in ("domain_events", "webhook_deliveries"):
        op.drop_index(f"ix_{table}_awaiting_run", table_name=table)
        op.drop_column(table, "awaiting_run")
    op.drop_index("ix_pipeline_triggers_awaiting_run", table_name="pipeline_triggers")
    op.drop_column("pipeline_triggers", "awaiting_run_for")
