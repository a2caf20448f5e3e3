"""notifications: endpoints a workspace registers, the deliveries queued for them, and their attempts

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# SQLite only autoincrements an INTEGER primary key.
BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notification_endpoints",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("description", sa.String(length=200), nullable=True),
        sa.Column("event_types", sa.JSON(), nullable=False),
        sa.Column("pipeline_ids", sa.JSON(), nullable=True),
        sa.Column("credits_below_micros", BIGINT, nullable=True),
        sa.Column("signing_secrets", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_notification_endpoints_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_endpoints")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_notification_endpoints_workspace_id"), "notification_endpoints", ["workspace_id"], unique=False
    )
    op.create_table(
        "notification_deliveries",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("endpoint_id", BIGINT, nullable=False),
        sa.Column("event_type", sa.String(length=32), nullable=False),
        sa.Column("message_id", sa.String(length=64), nullable=False),
        sa.Column("dedupe_key", sa.String(length=255), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", BIGINT, nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("leased_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_code", BIGINT, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'succeeded', 'failed')", name=op.f("ck_notification_deliveries_status_valid")
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["notification_endpoints.id"],
            name=op.f("fk_notification_deliveries_endpoint_id_notification_endpoints"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_notification_deliveries_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_deliveries")),
        sa.UniqueConstraint(
            "endpoint_id", "dedupe_key", name=op.f("uq_notification_deliveries_endpoint_id_dedupe_key")
        ),
        sa.UniqueConstraint("message_id", name=op.f("uq_notification_deliveries_message_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_notification_deliveries_due", "notification_deliveries", ["status", "next_attempt_at"], unique=False
    )
    op.create_index(
        "ix_notification_deliveries_endpoint_id_id", "notification_deliveries", ["endpoint_id", "id"], unique=False
    )
    op.create_index(
        op.f("ix_notification_deliveries_workspace_id"), "notification_deliveries", ["workspace_id"], unique=False
    )
    op.create_table(
        "notification_attempts",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("delivery_id", BIGINT, nullable=False),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_code", BIGINT, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", BIGINT, nullable=False),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["notification_deliveries.id"],
            name=op.f("fk_notification_attempts_delivery_id_notification_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_attempts")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_notification_attempts_delivery_id"), "notification_attempts", ["delivery_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_notification_attempts_delivery_id"), table_name="notification_attempts")
    op.drop_table("notification_attempts")
    op.drop_index(op.f("ix_notification_deliveries_workspace_id"), table_name="notification_deliveries")
    op.drop_index("ix_notification_deliveries_endpoint_id_id", table_name="notification_deliveries")
    op.drop_index("ix_notification_deliveries_due", table_name="notification_deliveries")
    op.drop_table("notification_deliveries")
    op.drop_index(op.f("ix_notification_endpoints_workspace_id"), table_name="notification_endpoints")
    op.drop_table("notification_endpoints")
