"""owned hosts: the hosts a workspace declares it owns, on which its connectors may ignore robots.txt

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

Every workspace made before this revision owns none, so every crawl obeys robots.txt, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


# A plain column, added and dropped in place: batch mode would rebuild the SQLite table (see 0013).
def upgrade() -> None:
    op.add_column("workspaces", sa.Column("owned_hosts", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    op.drop_column("workspaces", "owned_hosts")
