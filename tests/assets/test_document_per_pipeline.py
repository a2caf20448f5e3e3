"""A KB document belongs to the pipeline that wrote it: two pipelines of one workspace over one URL keep a document
each, in its own folder, with its own timeline and listing, however often both crawl."""

from __future__ import annotations

import sqlalchemy as sa

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Folder, PageChange
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.kb.documents import list_documents
from tests.assets.conftest import Stack
from tests.support.web import page


def test_two_pipelines_over_one_url_keep_a_document_each_in_their_folders(stack: Stack):
    urls = stack.site(2)
    workspace_id, first = stack.pipeline(urls, folder="Docs")
    with transaction(stack.sessions) as session:
        connector = create_connector(session, workspace_id=workspace_id, connector_type="webcrawler", urls=urls)
        second = services.create_pipeline(
            session,
            stack.instance,
            workspace_id=workspace_id,
            connector_id=connector.id,
            name="support copy",
            folder_name="Support",
        ).id
    with stack.sessions() as session:
        rows = session.execute(sa.select(Folder.name, Folder.id).where(Folder.workspace_id == workspace_id))
        folders = dict(rows.all())
    owners = {first: folders["Docs"], second: folders["Support"]}

    seen: set[tuple[int, int | None, int | None, str | None]] = set()
    for round_ in range(3):
        stack.web.route("/p0", page("Page 0", f"Edited {round_} times."))
        for pipeline_id in (first, second):
            assert stack.run(pipeline_id, workspace_id, assets=[crawl_results, kb_documents, page_changes]).success
        documents = stack.documents(workspace_id)
        assert len(documents) == 4
        assert {(d.pipeline_id, d.folder_id) for d in documents} == set(owners.items())
        assert all(d.folder_id == owners[d.pipeline_id] and d.status_state == "ready" for d in documents)
        assert {f"Edited {round_} times." in (d.content or "") for d in documents if d.url == urls[0]} == {True}
        # The same rows every round: updated in place, never moved or made again.
        seen |= {(d.id, d.pipeline_id, d.folder_id, d.url) for d in documents}
    assert len(seen) == 4

    by_pipeline = {d.id: d.pipeline_id for d in stack.documents(workspace_id)}
    with stack.sessions() as session:
        changes = session.execute(
            sa.select(PageChange.pipeline_id, PageChange.document_id).where(PageChange.pipeline_id.in_(owners))
        ).all()
        for pipeline_id in (first, second):
            listed, _ = list_documents(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
            assert sorted(view.url for view in listed) == sorted(urls)
            assert {view.folder_id for view in listed} == {owners[pipeline_id]}
    # Each pipeline's timeline points at its own document.
    assert changes and all(by_pipeline[document_id] == pipeline_id for pipeline_id, document_id in changes)
