"""The KB follows the crawl through real pipeline runs: a page that left the list or answers 404/410 is archived
after a healthy crawl, restored when it returns, and a crawl under its threshold archives nothing."""

from __future__ import annotations

import dagster as dg

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, Pipeline
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.core.catalog.connectors import set_initial_urls
from tests.assets.conftest import Stack, materialization, set_pipeline
from tests.support.web import NOT_FOUND, Reply, page


def set_urls(stack: Stack, pipeline_id: int, urls: list[str]) -> None:
    """Edit the URL list of the pipeline's connector, as a user would between crawls."""
    with transaction(stack.sessions) as session:
        pipeline = session.get(Pipeline, pipeline_id)
        set_initial_urls(session.get(Connector, pipeline.connector_id), urls)


def archived(stack: Stack, workspace_id: int) -> dict[str, str | None]:
    return {d.url: d.archived_by_run_id for d in stack.documents(workspace_id) if d.archived_at is not None}


def kb_counts(result: dg.ExecuteInProcessResult) -> tuple[int, int]:
    kb = materialization(result, "kb_documents")
    return kb["documents_archived"], kb["documents_restored"]


def logged(stack: Stack, result: dg.ExecuteInProcessResult) -> str:
    return "\n".join(entry.user_message for entry in stack.instance.all_logs(result.run_id))


def test_a_url_removed_from_the_list_is_archived_and_restored_when_it_returns(stack: Stack):
    urls = stack.site(5)
    workspace_id, pipeline_id = stack.pipeline(urls)
    assert kb_counts(stack.run(pipeline_id, workspace_id)) == (0, 0)
    set_urls(stack, pipeline_id, urls[:4])
    second = stack.run(pipeline_id, workspace_id)
    assert second.success and kb_counts(second) == (1, 0)
    assert archived(stack, workspace_id) == {urls[4]: second.run_id}
    # Still in the KB, with its content.
    [kept] = [d for d in stack.documents(workspace_id) if d.url == urls[4]]
    assert kept.status_state == "ready" and "Paragraph about topic 4" in kept.content

    set_urls(stack, pipeline_id, urls)
    third = stack.run(pipeline_id, workspace_id)
    assert kb_counts(third) == (0, 1)
    assert archived(stack, workspace_id) == {}


def test_a_page_answering_404_or_410_is_archived(embedded: Stack):
    urls = embedded.site(10)
    workspace_id, pipeline_id = embedded.pipeline(urls)
    assert embedded.run(pipeline_id, workspace_id).success
    embedded.web.route("/p8", NOT_FOUND)
    embedded.web.route("/p9", Reply(status=410, body="gone", content_type="text/plain"))
    result = embedded.run(pipeline_id, workspace_id)
    assert materialization(result, "crawl_results")["urls_succeeded"] == 8
    assert kb_counts(result) == (2, 0)
    assert archived(embedded, workspace_id) == {urls[8]: result.run_id, urls[9]: result.run_id}


def test_a_crawl_under_its_threshold_archives_nothing_and_says_why(embedded: Stack):
    urls = embedded.site(5)
    workspace_id, pipeline_id = embedded.pipeline(urls)
    assert embedded.run(pipeline_id, workspace_id).success
    for path in ("/p0", "/p1"):
        embedded.web.route(path, page("Down", "Server error.", status=500))
    set_urls(embedded, pipeline_id, urls[:4])
    result = embedded.run(pipeline_id, workspace_id)
    # The run fails on the unhealthy crawl; its KB step does not run on it.
    assert not result.success and "kb_documents" not in {
        e.asset_key.to_user_string() for e in result.get_asset_materialization_events()
    }
    assert archived(embedded, workspace_id) == {}
    assert "no page is recorded as removed or archived" in logged(embedded, result)
    assert "2 of 4 URLs succeeded (50%), under the threshold of 80%" in logged(embedded, result)
    # Indexing that crawl again (a backfill of kb_documents) still archives nothing, and says why.
    backfill = embedded.run(pipeline_id, workspace_id, assets=[crawl_results.to_source_asset(), kb_documents])
    assert kb_counts(backfill) == (0, 0)
    assert archived(embedded, workspace_id) == {}
    assert "no documents archived" in logged(embedded, backfill)


def test_the_pipelines_own_threshold_decides(embedded: Stack):
    urls = embedded.site(5)
    workspace_id, pipeline_id = embedded.pipeline(urls)
    assert embedded.run(pipeline_id, workspace_id).success
    set_pipeline(embedded, pipeline_id, config={"MIN_SUCCESS_RATIO": 0.5})
    for path in ("/p0", "/p1"):
        embedded.web.route(path, page("Down", "Server error.", status=500))
    set_urls(embedded, pipeline_id, urls[:4])
    result = embedded.run(pipeline_id, workspace_id)
    assert kb_counts(result) == (1, 0)
    assert archived(embedded, workspace_id) == {urls[4]: result.run_id}


def test_the_kb_step_inside_the_crawl_step_archives_too(embedded: Stack):
    urls = embedded.site(5)
    workspace_id, pipeline_id = embedded.pipeline(urls)
    assert embedded.run(pipeline_id, workspace_id, assets=[crawl_results]).success
    set_urls(embedded, pipeline_id, urls[1:])
    result = embedded.run(pipeline_id, workspace_id, assets=[crawl_results])
    assert kb_counts(result) == (1, 0)
    assert archived(embedded, workspace_id) == {urls[0]: result.run_id}
