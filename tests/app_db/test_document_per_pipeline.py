"""Migration 0007 on SQLite and PostgreSQL: documents written under the old (workspace, URL) identity are
found again under (workspace, pipeline, URL), and a downgrade gives the old identity back without a clash."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa
from alembic import command

from pipelines_dagster.app_db.engine import session_factory
from pipelines_dagster.app_db.migrate import alembic_config, current_revision, upgrade
from pipelines_dagster.core.kb.index import Destination, document_identity, index_crawl
from tests.core.kb.test_index import page

URL = "https://example.com/shared"


def old_identity(url: str, workspace_id: int) -> str:
    return hashlib.sha256(f"CRAWLED_URL:{url}:{workspace_id}".encode()).hexdigest()


@pytest.fixture
def at_0006(empty_database: sa.Engine) -> sa.Engine:
    """A new app database of the backend, migrated to 0006 only."""
    upgrade(empty_database, "0006")
    return empty_database


def insert(conn: sa.Connection, table: str, **values: object) -> int:
    """A row as revision 0006 has the table, by plain SQL: the models may have moved on since."""
    columns = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    return conn.execute(sa.text(f"INSERT INTO {table} ({columns}) VALUES ({marks}) RETURNING id"), values).scalar_one()


def old_pipeline(conn: sa.Connection, workspace: int, name: str) -> int:
    """A pipeline row as the early revisions have the table."""
    return insert(
        conn,
        "pipelines",
        workspace_id=workspace,
        name=name,
        save_to_kb=True,
        config="{}",
        enabled=True,
        system_managed=False,
        created_at="2026-11-01",
        updated_at="2026-11-01",
    )


def pipeline_at(engine: sa.Engine, revision: str) -> tuple[int, int]:
    """The database at `revision`, holding a workspace and a pipeline "made before" the next one: their ids."""
    upgrade(engine, revision)
    with engine.begin() as conn:
        workspace = insert(conn, "workspaces", name="acme", owner_user_id="u", created_at="2026-11-01")
        return workspace, old_pipeline(conn, workspace, "made before")


def old_document(workspace_id: int, pipeline_id: int | None, url: str | None, **values: object) -> dict[str, object]:
    return {
        "workspace_id": workspace_id,
        "pipeline_id": pipeline_id,
        "document_type": "CRAWLED_URL",
        "url": url,
        "unique_identifier_hash": old_identity(url or "", workspace_id),
        "title": "t",
        "metadata": "{}",
        "status_state": "ready",
        "created_at": "2026-11-01",
        "updated_at": "2026-11-01",
    } | values


def identities(engine: sa.Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT id, unique_identifier_hash FROM documents")).all())


def test_upgrade_rewrites_old_identities_and_indexing_finds_the_documents_again(at_0006: sa.Engine):
    with at_0006.begin() as conn:
        workspace = insert(conn, "workspaces", name="acme", owner_user_id="u", created_at="2026-11-01")
        pipelines = [old_pipeline(conn, workspace, name) for name in ("a", "b")]
        # More than a batch of the migration's (1,000), alternating between the two pipelines.
        urls = [URL, *(f"https://example.com/{n}" for n in range(2100))]
        crawled = {
            url: insert(conn, "documents", **old_document(workspace, pipelines[n % 2], url))
            for n, url in enumerate(urls)
        }
        orphan = insert(conn, "documents", **old_document(workspace, None, "https://example.com/orphan"))
        upload = insert(
            conn,
            "documents",
            **old_document(workspace, pipelines[0], None, document_type="FILE", unique_identifier_hash="f" * 64),
        )
    before = identities(at_0006)

    upgrade(at_0006, "0007")
    assert current_revision(at_0006) == "0007"
    after = identities(at_0006)
    for n, (url, document_id) in enumerate(crawled.items()):
        assert after[document_id] == document_identity(url, workspace_id=workspace, pipeline_id=pipelines[n % 2])
    # No pipeline to find it again, or not a crawled page: left as it was.
    assert (after[orphan], after[upload]) == (before[orphan], before[upload])

    # The first pipeline's next crawl updates its document; the second gets one of its own.
    sessions = session_factory(at_0006)
    for pipeline_id in pipelines:
        destination = Destination(workspace_id=workspace, pipeline_id=pipeline_id, connector_id=None, folder_id=None)
        index_crawl(sessions, destination, lambda: [page(URL, "Shared text")])
    with at_0006.connect() as conn:
        shared = conn.execute(
            sa.text("SELECT id, pipeline_id FROM documents WHERE url = :url ORDER BY id"), {"url": URL}
        ).all()
    first, second = shared
    assert (first.id, first.pipeline_id, second.pipeline_id) == (crawled[URL], pipelines[0], pipelines[1])

    # Back to 0006: one document per URL takes the old identity, the newest; the other keeps its own.
    command.downgrade(alembic_config(at_0006), "0006")
    downgraded = identities(at_0006)
    assert downgraded[second.id] == old_identity(URL, workspace)
    assert downgraded[first.id] == after[first.id]
    assert all(downgraded[document_id] == before[document_id] for url, document_id in crawled.items() if url != URL)
