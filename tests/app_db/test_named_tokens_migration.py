"""Revision 0012 on SQLite and PostgreSQL: the tokens made before named tokens keep working, each named so
that no two live tokens of a workspace share a name (the first `default`), and the name is unique among the
live tokens only."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.migrate import upgrade
from tests.app_db.test_document_per_pipeline import insert


def old_token(conn: sa.Connection, workspace_id: int, digest: str) -> int:
    return insert(
        conn, "api_tokens", workspace_id=workspace_id, token_hash=digest, prefix="pdk_old", created_at="2026-11-01"
    )


def test_upgrade_names_every_old_token_and_keeps_it_live(empty_database: sa.Engine):
    upgrade(empty_database, "0011")
    with empty_database.begin() as conn:
        acme = insert(conn, "workspaces", name="acme", owner_user_id="u", created_at="2026-11-01")
        globex = insert(conn, "workspaces", name="globex", owner_user_id="u", created_at="2026-11-01")
        first, second = old_token(conn, acme, "a" * 64), old_token(conn, acme, "b" * 64)
        theirs = old_token(conn, globex, "c" * 64)

    upgrade(empty_database, "0012")
    with empty_database.begin() as conn:
        rows = conn.execute(sa.text("SELECT id, name, revoked_at FROM api_tokens ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [
            (first, "default", None),
            (second, f"token-{second}", None),
            (theirs, "default", None),
        ]
        conn.execute(sa.text("UPDATE api_tokens SET revoked_at = CURRENT_TIMESTAMP WHERE id = :id"), {"id": first})
        # A revoked token's name is free again.
        insert(
            conn,
            "api_tokens",
            workspace_id=acme,
            name="default",
            token_hash="d" * 64,
            prefix="p",
            created_at="2026-12-05",
        )
    with pytest.raises(sa.exc.IntegrityError, match=r"uq_api_tokens_live_name|UNIQUE"), empty_database.begin() as conn:
        insert(
            conn,
            "api_tokens",
            workspace_id=acme,
            name="default",
            token_hash="e" * 64,
            prefix="p",
            created_at="2026-12-05",
        )
