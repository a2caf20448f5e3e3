"""Migration 0008 on SQLite and PostgreSQL: the github-mode bodies accepted before it stay replays after
retention prunes their deliveries, and a downgrade takes the digests away."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.migrate import alembic_config, current_revision, upgrade
from pipelines_dagster.core.security.tokens import hash_token
from pipelines_dagster.core.storage.retention import cutoff, prune_webhook_deliveries
from pipelines_dagster.core.triggers.webhooks import accept_delivery, sign
from tests.app_db.test_document_per_pipeline import insert, old_pipeline

GITHUB_TOKEN = "whk_" + "g" * 43
BODY = b'{"ref": "main", "after": "0c1d"}'


def old_trigger(conn: sa.Connection, workspace: int, pipeline: int, signing: str, token: str) -> int:
    return insert(
        conn,
        "pipeline_triggers",
        workspace_id=workspace,
        pipeline_id=pipeline,
        kind="webhook",
        webhook_secret_hash=hash_token(token),
        signing=signing,
        enabled=True,
        created_at="2026-11-01",
        updated_at="2026-11-01",
    )


def old_delivery(conn: sa.Connection, workspace: int, trigger: int, dedupe_key: str) -> int:
    return insert(
        conn,
        "webhook_deliveries",
        workspace_id=workspace,
        trigger_id=trigger,
        dedupe_key=dedupe_key,
        payload=BODY,
        headers="{}",
        received_at="2026-11-01",
    )


def test_upgrade_keeps_the_github_bodies_accepted_before_it_as_replays(empty_database: sa.Engine):
    upgrade(empty_database, "0007")
    with empty_database.begin() as conn:
        workspace = insert(conn, "workspaces", name="acme", owner_user_id="u", created_at="2026-11-01")
        pipelines = [old_pipeline(conn, workspace, name) for name in ("github", "standard")]
        github = old_trigger(conn, workspace, pipelines[0], "github", GITHUB_TOKEN)
        standard = old_trigger(conn, workspace, pipelines[1], "standard", "whk_" + "s" * 43)
        accepted = old_delivery(conn, workspace, github, "sha256:" + hashlib.sha256(BODY).hexdigest())
        old_delivery(conn, workspace, standard, "id:msg_1")

    upgrade(empty_database, "0008")
    assert current_revision(empty_database) == "0008"
    with empty_database.connect() as conn:
        digests = conn.execute(sa.text("SELECT trigger_id, delivery_id FROM webhook_body_digests")).all()
    assert [tuple(row) for row in digests] == [(github, accepted)]

    # A month on, retention has pruned the delivery; the captured request (to the code at head) is still a replay.
    upgrade(empty_database)
    sessions = session_factory(empty_database)
    later = datetime(2026, 12, 15, tzinfo=UTC)
    assert prune_webhook_deliveries(sessions, older_than=cutoff(later, 30)) == 2
    with transaction(sessions) as session:
        again = accept_delivery(
            session, token=GITHUB_TOKEN, body=BODY, headers={"X-Hub-Signature-256": sign(BODY, GITHUB_TOKEN)}, now=later
        )
    assert again.duplicate and again.delivery_id == accepted
    with empty_database.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM webhook_deliveries")) == 0

    command.downgrade(alembic_config(empty_database), "0007")
    assert "webhook_body_digests" not in sa.inspect(empty_database).get_table_names()


def test_a_digest_row_is_small(postgres_engine):
    """What the README promises each accepted github-mode body costs on PostgreSQL, index included."""
    rows = 10_000
    with postgres_engine.begin() as conn:
        conn.exec_driver_sql("CREATE TEMPORARY TABLE digest_size (LIKE webhook_body_digests INCLUDING ALL)")
        conn.execute(
            sa.text(
                "INSERT INTO digest_size SELECT 1, 'sha256:' || encode(sha256(n::text::bytea), 'hex'), n, now()"
                " FROM generate_series(1, :rows) AS n"
            ),
            {"rows": rows},
        )
        size = conn.scalar(sa.text("SELECT pg_total_relation_size('digest_size')"))
    assert size / rows < 300, f"{size / rows:.0f} bytes a digest"
