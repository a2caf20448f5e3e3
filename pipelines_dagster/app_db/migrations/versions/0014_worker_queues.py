"""worker queues: the Celery queue a pipeline's runs go to, per pipeline

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

NULL, what every pipeline made before this revision gets, sends its runs to the run launcher's default queue,
as before, so an upgrade moves no run to another worker.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


# A plain column, added and dropped in place: batch mode would rebuild the SQLite table (see 0013).
def upgrade() -> None:
    op.add_column("pipelines", sa.Column("worker_queue", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("pipelines", "worker_queue")
