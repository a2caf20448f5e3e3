"""A plain-text page holding NUL bytes, crawled into PostgreSQL, which cannot store NUL in text."""

from __future__ import annotations

import sqlalchemy as sa

from pipelines_dagster.app_db.models import PageChange, PageState
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from tests.assets.conftest import Stack, materialization
from tests.support.web import Reply

ALL = [crawl_results, kb_documents, page_changes]


def text_page(body: bytes) -> Reply:
    return Reply(body=body, content_type="text/plain; charset=utf-8")


def changes(stack: Stack, pipeline_id: int) -> list[PageChange]:
    with stack.sessions() as session:
        query = sa.select(PageChange).where(PageChange.pipeline_id == pipeline_id).order_by(PageChange.id)
        return list(session.scalars(query))


def counts(result) -> tuple[int, int, int, int]:
    meta = materialization(result, "page_changes")
    return meta["pages_new"], meta["pages_changed"], meta["pages_same"], meta["pages_removed"]


def test_a_page_with_nul_bytes_is_stored_without_them_on_postgres(production: Stack):
    stack = production
    stack.web.route("/notes.txt", text_page(b"Release notes\x00\nFixed the \x00importer.\n"))
    url = stack.web.url("/notes.txt")
    workspace_id, pipeline_id = stack.pipeline([url])

    first = stack.run(pipeline_id, workspace_id, assets=ALL)
    assert first.success
    [document] = stack.documents(workspace_id)
    assert (document.status_state, document.content) == ("ready", "Release notes\nFixed the importer.\n")
    assert [(change.url, change.status) for change in changes(stack, pipeline_id)] == [(url, "new")]
    [record] = stack.blob.read_jsonl(materialization(first, "crawl_results")["blob_key"])
    assert "\x00" not in record["content"]

    # The same text with its NUL bytes elsewhere is the same page: no change, no rewritten document.
    stack.web.route("/notes.txt", text_page(b"Release notes\nFixed the importer.\x00\x00\n"))
    same = stack.run(pipeline_id, workspace_id, assets=ALL)
    assert same.success and counts(same) == (0, 0, 1, 0)
    assert materialization(same, "kb_documents")["documents_unchanged"] == 1

    stack.web.route("/notes.txt", text_page(b"Release notes\x00\nAdded \x00export.\nFixed the \x00importer.\n"))
    changed = stack.run(pipeline_id, workspace_id, assets=ALL)
    assert changed.success and counts(changed) == (0, 1, 0, 0)
    [document] = stack.documents(workspace_id)
    assert document.content == "Release notes\nAdded export.\nFixed the importer.\n"
    diff = changes(stack, pipeline_id)[-1].diff
    # Only the added line differs: the stored text and the new crawl compare without NUL on both sides.
    assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        "+Added export."
    ]
    with stack.sessions() as session:
        state = session.scalars(sa.select(PageState).where(PageState.pipeline_id == pipeline_id)).one()
    assert state.content == "Release notes\nAdded export.\nFixed the importer."
