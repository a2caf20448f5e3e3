"""Outside text holding NUL or lone surrogates is stored, the same on SQLite and PostgreSQL, without them."""

from __future__ import annotations

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import (
    Connector,
    Document,
    DomainEvent,
    Folder,
    NotificationEndpoint,
    PageChange,
    PageState,
    Pipeline,
    Workspace,
)

URL = "https://example.com/notes\x00.txt"
CLEAN_URL = "https://example.com/notes.txt"


def test_crawled_text_metadata_and_diffs_are_written_and_read_back_without_nul(sessions):
    with transaction(sessions) as session:
        workspace = Workspace(name="acme", owner_user_id="owner")
        session.add(workspace)
        session.flush()
        pipeline = Pipeline(workspace_id=workspace.id, name="p")
        session.add(pipeline)
        session.flush()
        workspace_id = workspace.id
        document = Document(
            workspace_id=workspace.id,
            pipeline_id=pipeline.id,
            document_type="CRAWLED_URL",
            url=URL,
            unique_identifier_hash="a" * 64,
            title="Release\x00 notes",
            content="Fixed the \x00importer.\ud800\n",
            document_metadata={"title": "Release\x00 notes", "tags\x00": ["a\x00", {"b": "\udc00c"}], "words": 3},
            status_reason="crawl ended \x00empty",
        )
        session.add(document)
        session.flush()
        session.add_all(
            [
                PageChange(
                    workspace_id=workspace.id,
                    pipeline_id=pipeline.id,
                    url=URL,
                    document_id=document.id,
                    run_id="run-1",
                    status="changed",
                    diff="-Fixed the \x00importer.\n+Fixed the importer.\x00\n",
                ),
                PageState(
                    workspace_id=workspace.id,
                    pipeline_id=pipeline.id,
                    url=URL,
                    url_hash="b" * 64,
                    content="Fixed the \x00importer.",
                    run_id="run-1",
                ),
            ]
        )

    with sessions() as session:
        stored = session.scalars(sa.select(Document).where(Document.workspace_id == workspace_id)).one()
        change = session.scalars(sa.select(PageChange).where(PageChange.workspace_id == workspace_id)).one()
        state = session.scalars(sa.select(PageState).where(PageState.workspace_id == workspace_id)).one()
        # What SQL reads out of the JSON column as text: PostgreSQL refuses an escaped NUL there.
        title = session.scalar(
            sa.select(Document.document_metadata["title"].as_string()).where(Document.id == stored.id)
        )
        # A lookup by the text as received finds the row stored without NUL.
        found = session.scalar(sa.select(Document.id).where(Document.workspace_id == workspace_id, Document.url == URL))
    assert (stored.url, stored.title, stored.content) == (CLEAN_URL, "Release notes", "Fixed the importer.\n")
    assert stored.document_metadata == {"title": "Release notes", "tags": ["a", {"b": "c"}], "words": 3}
    assert stored.status_reason == "crawl ended empty"
    assert (change.url, change.diff) == (CLEAN_URL, "-Fixed the importer.\n+Fixed the importer.\n")
    assert (state.url, state.content) == (CLEAN_URL, "Fixed the importer.")
    assert title == "Release notes"
    assert found == stored.id


def test_what_clients_send_is_written_without_lone_surrogates(sessions):
    # JSON "\ud800" parses to a lone surrogate, which neither psycopg2 nor sqlite3 can encode.
    with transaction(sessions) as session:
        workspace = Workspace(name="acme\ud800", owner_user_id="owner")
        session.add(workspace)
        session.flush()
        workspace_id = workspace.id
        connector = Connector(
            workspace_id=workspace.id,
            name="web\udfff",
            connector_type="webcrawler",
            config={"INITIAL_URLS": ["https://example.com/\ud800a"]},
        )
        session.add(connector)
        session.flush()
        session.add_all(
            [
                Folder(workspace_id=workspace.id, name="Docs\ud800"),
                Pipeline(
                    workspace_id=workspace.id,
                    connector_id=connector.id,
                    name="p\ud800",
                    config={"INITIAL_URLS": ["https://example.com/\x00b"]},
                ),
                DomainEvent(workspace_id=workspace.id, event_type="refresh.requested", payload={"note\ud800": "x\x00"}),
                NotificationEndpoint(
                    workspace_id=workspace.id,
                    url="https://hooks.example.com/\ud800in",
                    description="ops\x00",
                    event_types=["run.failed"],
                    signing_secrets=[],
                ),
            ]
        )

    with sessions() as session:
        assert session.get(Workspace, workspace_id).name == "acme"
        assert session.scalars(sa.select(Folder.name).where(Folder.workspace_id == workspace_id)).one() == "Docs"
        connector = sa.select(Connector.name, Connector.config).where(Connector.workspace_id == workspace_id)
        assert session.execute(connector).one() == (
            "web",
            {"INITIAL_URLS": ["https://example.com/a"]},
        )
        pipeline = sa.select(Pipeline.name, Pipeline.config).where(Pipeline.workspace_id == workspace_id)
        assert session.execute(pipeline).one() == (
            "p",
            {"INITIAL_URLS": ["https://example.com/b"]},
        )
        event = sa.select(DomainEvent.payload).where(DomainEvent.workspace_id == workspace_id)
        assert session.scalars(event).one() == {"note": "x"}
        endpoint = sa.select(NotificationEndpoint.url, NotificationEndpoint.description).where(
            NotificationEndpoint.workspace_id == workspace_id
        )
        assert session.execute(endpoint).one() == (
            "https://hooks.example.com/in",
            "ops",
        )
