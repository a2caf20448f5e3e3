"""trigger integrity: webhook signing modes, rows taken by the trigger sensors, per-pipeline retry policy

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Existing webhook triggers were signed with their URL token: they become `github` mode.
Deliveries and events older than an hour are marked as already requested (the cursor
sensors that preceded this took them); newer ones are left for the sensors, whose run
keys keep a row that did get its run from getting a second.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PENDING = sa.text("requested_at IS NULL")


def _checked(name: str, type_: sa.types.TypeEngine[Any], check: str, **kwargs: Any) -> sa.Column[Any]:
    # SQLite cannot add a table constraint to an existing table, but takes one on a new column.
    return sa.Column(name, type_, sa.CheckConstraint(check, name=f"{name}_valid"), **kwargs)


def upgrade() -> None:
    op.add_column(
        "pipelines",
        _checked(
            "retry_backoff",
            sa.String(16),
            "retry_backoff IN ('linear', 'exponential')",
            nullable=False,
            server_default="exponential",
        ),
    )
    op.add_column(
        "pipelines",
        sa.Column(
            "retry_max",
            sa.Integer(),
            sa.CheckConstraint("retry_max >= 0", name="retry_max_not_negative"),
            nullable=False,
            server_default="3",
        ),
    )
    op.add_column(
        "pipelines",
        sa.Column(
            "retry_delay_seconds",
            sa.Float(),
            sa.CheckConstraint("retry_delay_seconds > 0", name="retry_delay_positive"),
            nullable=False,
            server_default="2",
        ),
    )
    op.add_column(
        "pipeline_triggers", _checked("signing", sa.String(16), "signing IN ('standard', 'github')", nullable=True)
    )
    op.add_column("pipeline_triggers", sa.Column("signing_secrets", sa.JSON(), nullable=True))
    op.execute("UPDATE pipeline_triggers SET signing = 'github' WHERE kind = 'webhook'")
    taken = sa.bindparam("taken", datetime.now(UTC), type_=sa.DateTime(timezone=True))
    for table, created in (("webhook_deliveries", "received_at"), ("domain_events", "created_at")):
        op.add_column(table, sa.Column("requested_at", sa.DateTime(timezone=True), nullable=True))
        op.get_bind().execute(
            sa.text(f"UPDATE {table} SET requested_at = :taken WHERE {created} < :cutoff").bindparams(
                taken, sa.bindparam("cutoff", datetime.now(UTC) - timedelta(hours=1), type_=sa.DateTime(timezone=True))
            )
        )
        op.create_index(f"ix_{table}_pending", table, ["id"], sqlite_where=PENDING, postgresql_where=PENDING)


def downgrade() -> None:
    # Plain ALTERs: a batch table rebuild on SQLite would drop `pipelines` with foreign keys on,
    # cascading into every row that references it.
    for table in ("domain_events", "webhook_deliveries"):
        op.drop_index(f"ix_{table}_pending", table_name=table)
        op.drop_column(table, "requested_at")
    for table, column in (
        ("pipeline_triggers", "signing_secrets"),
        ("pipeline_triggers", "signing"),
        ("pipelines", "retry_delay_seconds"),
        ("pipelines", "retry_max"),
        ("pipelines", "retry_backoff"),
    ):
        op.drop_column(table, column)
