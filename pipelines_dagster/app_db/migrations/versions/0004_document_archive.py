"""document archive: documents whose page left the crawl are kept, marked archived by a run

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("documents", sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("documents", sa.Column("archived_by_run_id", sa.String(length=64), nullable=True))
    op.create_index(op.f("ix_documents_pipeline_id_id"), "documents", ["pipeline_id", "id"], unique=False)


def downgrade() -> None:
    # Plain ALTERs: a batch table rebuild on SQLite would drop `documents` with foreign keys on,
    # cascading into the page changes that reference it.
    op.drop_index(op.f("ix_documents_pipeline_id_id"), table_name="documents")
    op.drop_column("documents", "archived_by_run_id")
    op.drop_column("documents", "archived_at")
