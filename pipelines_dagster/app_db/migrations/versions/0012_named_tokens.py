"""named tokens: a workspace holds several API tokens, each with a name unique among its live ones

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05

Every token made before this revision keeps working and gets a name: the workspace's first one
`default` (what `workspace create` names the token it prints now), any other `token-<id>`, so no two
live tokens of a workspace share a name. Revoked tokens keep theirs, and a name is free again once
its token is revoked.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

INDEX = "uq_api_tokens_live_name"
LIVE = sa.text("revoked_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("name", sa.String(100), nullable=True))
    op.execute(
        "UPDATE api_tokens SET name = CASE WHEN id = (SELECT min(t.id) FROM api_tokens t"
        " WHERE t.workspace_id = api_tokens.workspace_id) THEN 'default'"
        " ELSE 'token-' || CAST(id AS VARCHAR(20)) END"
    )
    with op.batch_alter_table("api_tokens") as batch:
        batch.alter_column("name", existing_type=sa.String(100), nullable=False)
    op.create_index(
        INDEX, "api_tokens", ["workspace_id", "name"], unique=True, sqlite_where=LIVE, postgresql_where=LIVE
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="api_tokens")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("name")
