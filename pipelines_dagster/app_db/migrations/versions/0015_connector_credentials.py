"""connector credentials: a site behind a login's credentials, sealed, in a column of their own

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

NULL, what every connector made before this revision gets, crawls without credentials, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


# A plain column, added and dropped in place: batch mode would rebuild the SQLite table (see 0013).
def upgrade() -> None:
    op.add_column("connectors", sa.Column("credentials", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("connectors", "credentials")
