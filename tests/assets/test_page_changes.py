"""page_changes over real crawls of a loopback site: the timeline rows, diffs and metadata of each crawl."""

from __future__ import annotations

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, Document, PageChange, PageState, Pipeline
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.jobs import pipeline_run
from tests.assets.conftest import Stack, failure_message, materialization
from tests.support.web import Reply, page

ALL = [crawl_results, kb_documents, page_changes]


def set_urls(stack: Stack, pipeline_id: int, urls: list[str]) -> None:
    with transaction(stack.sessions) as session:
        connector = session.get(Connector, session.get(Pipeline, pipeline_id).connector_id)
        connector.config = {"INITIAL_URLS": urls}


def rows(stack: Stack, pipeline_id: int) -> list[PageChange]:
    with stack.sessions() as session:
        return list(
            session.scalars(sa.select(PageChange).where(PageChange.pipeline_id == pipeline_id).order_by(PageChange.id))
        )


def counts(result) -> tuple[int, int, int, int]:
    meta = materialization(result, "page_changes")
    return meta["pages_new"], meta["pages_changed"], meta["pages_same"], meta["pages_removed"]


def test_edits_additions_and_removals_between_two_crawls(stack: Stack):
    urls = stack.site(5)
    workspace_id, pipeline_id = stack.pipeline(urls)
    first = stack.run(pipeline_id, workspace_id, assets=ALL)
    assert first.success and counts(first) == (5, 0, 0, 0)
    assert [(r.status, r.previous_hash) for r in rows(stack, pipeline_id)] == [("new", None)] * 5

    stack.web.route("/p1", page("Page 1", "Paragraph about topic 1.\n\nRewritten conclusion."))
    stack.web.route("/p3", Reply(status=404, body="gone"))
    stack.web.route("/added", page("Added", "A page added later."))
    # p2 leaves the URL list, /added joins it; 4 of 5 succeed, a healthy crawl.
    set_urls(stack, pipeline_id, [urls[0], urls[1], urls[3], urls[4], stack.web.url("/added")])
    second = stack.run(pipeline_id, workspace_id, assets=ALL)
    assert second.success and counts(second) == (1, 1, 2, 2)

    timeline = rows(stack, pipeline_id)[5:]
    assert {(r.url, r.status) for r in timeline} == {
        (urls[1], "changed"),
        (urls[3], "removed"),
        (stack.web.url("/added"), "new"),
        (urls[2], "removed"),
    }
    assert {r.run_id for r in timeline} == {second.run_id}
    changed = next(r for r in timeline if r.status == "changed")
    assert "-More on 1." in changed.diff and "+Rewritten conclusion." in changed.diff
    assert changed.previous_hash and changed.current_hash and changed.previous_hash != changed.current_hash
    with stack.sessions() as session:
        document = session.scalars(sa.select(Document).where(Document.url == urls[1])).one()
    assert changed.document_id == document.id
    removed = [r for r in timeline if r.status == "removed"]
    assert all(r.current_hash is None and r.previous_hash and r.diff is None for r in removed)
    meta = materialization(second, "page_changes")
    assert meta["source_crawl_run_id"] == second.run_id and "| changed |" in meta["changes"]


def test_an_unchanged_site_produces_no_rows(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(3))
    assert embedded.run(pipeline_id, workspace_id, assets=ALL).success
    again = embedded.run(pipeline_id, workspace_id, assets=ALL)
    assert counts(again) == (0, 0, 3, 0)
    assert len(rows(embedded, pipeline_id)) == 3
    with embedded.sessions() as session:
        checked = set(session.scalars(sa.select(PageState.run_id).where(PageState.pipeline_id == pipeline_id)))
    assert checked == {again.run_id}


def test_a_failed_page_is_not_removed_and_keeps_its_last_good_version(embedded: Stack):
    down = Reply(status=503, body="down")
    # The stack's crawler tries each URL twice.
    embedded.web.route("/flaky", page("Flaky", "Good content."), down, down, page("Flaky", "Good content."))
    # Four steady pages keep the crawl with the failed one healthy (4 of 5, at the threshold).
    workspace_id, pipeline_id = embedded.pipeline([*embedded.site(4), embedded.web.url("/flaky")])
    assert counts(embedded.run(pipeline_id, workspace_id, assets=ALL)) == (5, 0, 0, 0)
    failed = embedded.run(pipeline_id, workspace_id, assets=ALL)
    assert counts(failed) == (0, 0, 4, 0) and materialization(failed, "page_changes")["pages_skipped"] == 1
    assert counts(embedded.run(pipeline_id, workspace_id, assets=ALL)) == (0, 0, 5, 0)
    assert [r.status for r in rows(embedded, pipeline_id)] == ["new"] * 5


def test_rerunning_page_changes_over_the_same_crawl_appends_nothing(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2))
    assert embedded.run(pipeline_id, workspace_id, assets=ALL).success
    again = embedded.run(pipeline_id, workspace_id, assets=[page_changes])
    assert counts(again) == (0, 0, 0, 0) and materialization(again, "page_changes")["pages_already_recorded"] == 2
    assert len(rows(embedded, pipeline_id)) == 2


def test_page_changes_needs_a_stored_crawl(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    result = embedded.run(pipeline_id, workspace_id, assets=[page_changes])
    assert "has no stored crawl yet; materialize crawl_results first" in failure_message(result)


def test_the_pipeline_run_job_refreshes_the_timeline():
    assert page_changes.key in pipeline_run.selection.resolve([crawl_results, kb_documents, page_changes])
