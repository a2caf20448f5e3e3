"""webhook body digests: a github-mode trigger's replay guard, kept when retention prunes the delivery

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# SQLite only autoincrements an INTEGER primary key.
BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_body_digests",
        sa.Column("trigger_id", BIGINT, nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=False),
        sa.Column("delivery_id", BIGINT, nullable=True),
        sa.Column("accepted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trigger_id"],
            ["pipeline_triggers.id"],
            name=op.f("fk_webhook_body_digests_trigger_id_pipeline_triggers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trigger_id", "dedupe_key", name=op.f("pk_webhook_body_digests")),
    )
    # The github-mode bodies accepted so far are guarded from now on, not only the ones to come.
    op.execute(
        "INSERT INTO webhook_body_digests (trigger_id, dedupe_key, delivery_id, accepted_at)"
        " SELECT d.trigger_id, d.dedupe_key, d.id, d.received_at FROM webhook_deliveries d"
        " JOIN pipeline_triggers t ON t.id = d.trigger_id WHERE t.signing = 'github'"
    )


def downgrade() -> None:
    op.drop_table("webhook_body_digests")
