"""credit holds: what a run reserves of its workspace's credit before its first request

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# SQLite only autoincrements an INTEGER primary key.
BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
OPEN = sa.text("status = 'open'")

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "credit_holds",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("account_id", BIGINT, nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("micros", BIGINT, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('open', 'settled', 'released')", name=op.f("ck_credit_holds_status_valid")),
        sa.CheckConstraint("micros >= 0", name=op.f("ck_credit_holds_micros_not_negative")),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["credit_accounts.id"],
            name=op.f("fk_credit_holds_account_id_credit_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_credit_holds")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_credit_holds_idempotency_key")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_credit_holds_run_id"), "credit_holds", ["run_id"], unique=False)
    op.create_index(
        "ix_credit_holds_open", "credit_holds", ["account_id"], unique=False, sqlite_where=OPEN, postgresql_where=OPEN
    )


def downgrade() -> None:
    op.drop_index("ix_credit_holds_open", table_name="credit_holds")
    op.drop_index(op.f("ix_credit_holds_run_id"), table_name="credit_holds")
    op.drop_table("credit_holds")
