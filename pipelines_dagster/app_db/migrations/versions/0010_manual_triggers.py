"""manual triggers: every pipeline made before them gets one, on, so run-now keeps working after the upgrade

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

Run-now from the API and the CLI needs an enabled manual trigger (`run_engine.plan_manual_run`), and
new pipelines get one when they are made. A pipeline made before this revision without one (a
`pipeline create` pipeline, a connector's own indexing pipeline) gets it here, so an upgrade changes
nothing a user does; one that already has a manual trigger, on or off, keeps it as it is.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "INSERT INTO pipeline_triggers (workspace_id, pipeline_id, kind, enabled, created_at, updated_at)"
        " SELECT p.workspace_id, p.id, 'manual', TRUE, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM pipelines p"
        " WHERE NOT EXISTS (SELECT 1 FROM pipeline_triggers t WHERE t.pipeline_id = p.id AND t.kind = 'manual')"
    )


def downgrade() -> None:
    # The rows cannot be told from manual triggers made since; they stay, and switch nothing before this revision.
    pass
