"""KB indexing from crawl records: two phases, update in place, hash skip, failure keeps content."""

from __future__ import annotations

import contextlib

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Document, Folder, Pipeline, Workspace
from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.kb.index import Destination, content_hash, index_crawl


def setup(sessions) -> Destination:
    with transaction(sessions) as session:
        workspace = Workspace(name="acme", owner_user_id="u")
        session.add(workspace)
        session.flush()
        folder = Folder(workspace_id=workspace.id, name="Docs")
        pipeline = Pipeline(workspace_id=workspace.id, name="p")
        session.add_all([folder, pipeline])
        session.flush()
        return Destination(workspace_id=workspace.id, pipeline_id=pipeline.id, connector_id=None, folder_id=folder.id)


def page(url: str, content: str | None, *, status: str = "success", error: str | None = None) -> CrawlRecord:
    return CrawlRecord(
        url=url,
        status=status,
        content=content or "",
        metadata={"title": f"Title of {url}"} if content else {},
        error=error,
        content_hash=content_hash(content) if content else None,
    )


def documents(sessions, workspace_id: int) -> dict[str, Document]:
    with sessions() as session:
        rows = session.scalars(sa.select(Document).where(Document.workspace_id == workspace_id))
        return {row.url: row for row in rows}


def test_first_index_creates_ready_documents_in_the_folder(sessions):
    destination = setup(sessions)
    records = [page(f"https://example.com/{n}", f"# Page {n}") for n in range(7)]
    stats = index_crawl(sessions, destination, lambda: records, batch_size=3)
    assert (stats.created, stats.updated, stats.unchanged, stats.failed) == (7, 0, 0, 0)
    docs = documents(sessions, destination.workspace_id)
    assert len(docs) == 7
    assert {d.folder_id for d in docs.values()} == {destination.folder_id}
    assert {d.status_state for d in docs.values()} == {"ready"}
    assert docs["https://example.com/3"].content == "# Page 3"
    assert docs["https://example.com/3"].title == "Title of https://example.com/3"


def test_reindex_updates_in_place_and_skips_unchanged(sessions):
    destination = setup(sessions)
    index_crawl(sessions, destination, lambda: [page("https://e.com/a", "A"), page("https://e.com/b", "B")])
    before = documents(sessions, destination.workspace_id)
    stats = index_crawl(sessions, destination, lambda: [page("https://e.com/a", "A"), page("https://e.com/b", "B2")])
    assert (stats.created, stats.updated, stats.unchanged) == (0, 1, 1)
    after = documents(sessions, destination.workspace_id)
    assert after["https://e.com/b"].id == before["https://e.com/b"].id and after["https://e.com/b"].content == "B2"
    assert after["https://e.com/a"].updated_at == before["https://e.com/a"].updated_at


def test_a_failed_page_keeps_its_last_good_content(sessions):
    destination = setup(sessions)
    index_crawl(sessions, destination, lambda: [page("https://e.com/a", "good")])
    stats = index_crawl(
        sessions,
        destination,
        lambda: [
            page("https://e.com/a", None, status="failed", error="HTTP 500"),
            page("https://e.com/new", None, status="empty", error="no text"),
        ],
    )
    assert (stats.created, stats.failed) == (0, 2)
    docs = documents(sessions, destination.workspace_id)
    assert (docs["https://e.com/a"].status_state, docs["https://e.com/a"].status_reason) == ("failed", "HTTP 500")
    assert docs["https://e.com/a"].content == "good"
    assert docs["https://e.com/new"].status_state == "failed" and docs["https://e.com/new"].content is None


def test_a_recovered_page_is_ready_again(sessions):
    destination = setup(sessions)
    index_crawl(sessions, destination, lambda: [page("https://e.com/a", "good")])
    index_crawl(sessions, destination, lambda: [page("https://e.com/a", None, status="failed", error="timeout")])
    stats = index_crawl(sessions, destination, lambda: [page("https://e.com/a", "good")])
    assert stats.updated == 1
    assert documents(sessions, destination.workspace_id)["https://e.com/a"].status_state == "ready"


def test_phase_one_leaves_pending_rows_when_content_never_arrives(sessions):
    destination = setup(sessions)

    def records():
        yield page("https://e.com/a", "A")
        yield page("https://e.com/b", "B")

    calls = []

    def failing_second_pass():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("blob unreadable")
        return records()

    with contextlib.suppress(RuntimeError):
        index_crawl(sessions, destination, failing_second_pass)
    docs = documents(sessions, destination.workspace_id)
    assert {d.status_state for d in docs.values()} == {"pending"} and len(docs) == 2
    stats = index_crawl(sessions, destination, records)
    # Pending rows from the interrupted run are filled in, not duplicated.
    assert (stats.created, stats.updated) == (2, 0)
    assert {d.status_state for d in documents(sessions, destination.workspace_id).values()} == {"ready"}


def test_given_the_crawls_urls_the_index_reads_its_records_once_for_content(sessions):
    destination = setup(sessions)
    records = [page(f"https://e.com/{n}", f"# {n}") for n in range(5)]
    reads = []

    def read():
        reads.append(1)
        return iter(records)

    stats = index_crawl(sessions, destination, read, urls=[record.url for record in records], batch_size=2)
    assert len(reads) == 1
    assert (stats.created, stats.updated) == (5, 0)
    assert {d.status_state for d in documents(sessions, destination.workspace_id).values()} == {"ready"}


def test_two_pipelines_over_one_url_keep_a_document_each_in_their_folders(sessions):
    first = setup(sessions)
    with transaction(sessions) as session:
        folder = Folder(workspace_id=first.workspace_id, name="Other")
        pipeline = Pipeline(workspace_id=first.workspace_id, name="q")
        session.add_all([folder, pipeline])
        session.flush()
        second = Destination(
            workspace_id=first.workspace_id, pipeline_id=pipeline.id, connector_id=None, folder_id=folder.id
        )
    for text in ("v1", "v1", "v2"):
        for destination in (first, second):
            index_crawl(sessions, destination, lambda text=text: [page("https://e.com/shared", text)])
        with sessions() as session:
            rows = session.execute(
                sa.select(Document.pipeline_id, Document.folder_id, Document.content).where(
                    Document.workspace_id == first.workspace_id
                )
            ).all()
        assert sorted(rows) == sorted(
            [(first.pipeline_id, first.folder_id, text), (second.pipeline_id, second.folder_id, text)]
        )
