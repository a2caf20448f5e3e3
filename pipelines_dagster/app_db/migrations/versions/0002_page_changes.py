"""page changes: the page-change timeline and the last good observation of each page

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# The models' integer type: BIGINT, but INTEGER on SQLite, which autoincrements only that.
BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "page_changes",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("pipeline_id", BIGINT, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("document_id", BIGINT, nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("previous_hash", sa.String(length=64), nullable=True),
        sa.Column("current_hash", sa.String(length=64), nullable=True),
        sa.Column("diff", sa.Text(), nullable=True),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('new', 'changed', 'removed')", name=op.f("ck_page_changes_status_valid")),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name=op.f("fk_page_changes_document_id_documents"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_page_changes_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_page_changes_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_page_changes")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_page_changes_document_id"), "page_changes", ["document_id"], unique=False)
    op.create_index("ix_page_changes_pipeline_id_id", "page_changes", ["pipeline_id", "id"], unique=False)
    op.create_index(op.f("ix_page_changes_workspace_id"), "page_changes", ["workspace_id"], unique=False)
    op.create_table(
        "page_states",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("pipeline_id", BIGINT, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("url_hash", sa.String(length=64), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("last_checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_page_states_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_page_states_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_page_states")),
        sa.UniqueConstraint("pipeline_id", "url_hash", name=op.f("uq_page_states_pipeline_id_url_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_page_states_workspace_id"), "page_states", ["workspace_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_page_states_workspace_id"), table_name="page_states")
    op.drop_table("page_states")
    op.drop_index(op.f("ix_page_changes_workspace_id"), table_name="page_changes")
    op.drop_index("ix_page_changes_pipeline_id_id", table_name="page_changes")
    op.drop_index(op.f("ix_page_changes_document_id"), table_name="page_changes")
    op.drop_table("page_changes")
