"""max runtime: how long one run of a pipeline may take, per pipeline

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

NULL, what every pipeline made before this revision gets, keeps the deployment's maximum runtime
(run_monitoring.max_runtime_seconds), so an upgrade changes no run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

CHECK = "ck_pipelines_max_runtime_positive"
RULE = "max_runtime_seconds IS NULL OR max_runtime_seconds > 0"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # SQLite adds a column with its CHECK in one ALTER, without rebuilding the table.
        op.execute(f"ALTER TABLE pipelines ADD COLUMN max_runtime_seconds INTEGER CONSTRAINT {CHECK} CHECK ({RULE})")
        return
    op.add_column("pipelines", sa.Column("max_runtime_seconds", sa.Integer(), nullable=True))
    op.create_check_constraint(CHECK, "pipelines", RULE)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(CHECK, "pipelines", type_="check")
    op.drop_column("pipelines", "max_runtime_seconds")
