"""What the Dagster UI launches on a pipeline's partition keeps the KB and the timeline with the crawl.

The asset page launches the asset job over crawl_results alone (with its checks) and only the
partition tag: the crawl step then indexes and records the changes itself, from the blob it stored.
"""

from __future__ import annotations

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.models import PageChange
from pipelines_dagster.assets.after_crawl import steps_executed
from pipelines_dagster.assets.checks import asset_checks
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.runs import ERROR_METADATA
from tests.assets.conftest import Stack, failure_message, materialization

ASSETS = [crawl_results, kb_documents, page_changes]


def asset_job(stack: Stack) -> dg.JobDefinition:
    defs = dg.Definitions(assets=ASSETS, asset_checks=asset_checks, resources=stack.resources())
    return defs.resolve_implicit_global_asset_job_def()


def launch(stack: Stack, pipeline_id: int, selection: list[dg.AssetsDefinition]) -> dg.ExecuteInProcessResult:
    """The asset job over the selected assets and their checks, with only the partition tag, as the UI launches it."""
    job = asset_job(stack).get_subset(asset_selection={asset.key for asset in selection})
    return job.execute_in_process(partition_key=stack.key(pipeline_id), instance=stack.instance, raise_on_error=False)


def steps_of(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    """Which step logged each asset's materialization and each check's evaluation."""
    logged = {event.asset_key.to_user_string(): event.step_key for event in result.get_asset_materialization_events()}
    return logged | {
        event.asset_check_evaluation_data.check_name: event.step_key
        for event in result.all_events
        if event.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def page_change_rows(stack: Stack, pipeline_id: int) -> list[tuple[str, str]]:
    with stack.sessions() as session:
        return sorted(
            session.execute(
                sa.select(PageChange.url, PageChange.status).where(PageChange.pipeline_id == pipeline_id)
            ).all()
        )


def test_the_steps_a_run_executes(embedded: Stack):
    job = asset_job(embedded)
    whole = steps_executed(job.graph.node_names(), None)
    assert {"crawl_results", "kb_documents", "page_changes", "kb_documents_kb_documents_have_content"} <= whole
    alone = steps_executed(job.get_subset(asset_selection={crawl_results.key}).graph.node_names(), None)
    assert alone == {"crawl_results", "crawl_results_crawl_success_ratio", "crawl_results_crawl_blob_readable"}
    # A re-execution of the crawl step from the run page.
    assert steps_executed(job.graph.node_names(), ["crawl_results"]) == {"crawl_results"}


def test_crawl_results_alone_indexes_and_records_changes_in_its_step_and_charges_once(embedded: Stack):
    embedded.billing_enabled = True
    urls = embedded.site(3)
    workspace_id, pipeline_id = embedded.pipeline(urls, credit=10_000)
    result = launch(embedded, pipeline_id, [crawl_results])
    assert result.success
    assert steps_of(result) == {
        "crawl_results": "crawl_results",
        "kb_documents": "crawl_results",
        "page_changes": "crawl_results",
        "kb_documents_have_content": "crawl_results",
        "crawl_success_ratio": "crawl_results_crawl_success_ratio",
        "crawl_blob_readable": "crawl_results_crawl_blob_readable",
    }
    assert materialization(result, "kb_documents")["documents_created"] == 3
    assert materialization(result, "page_changes")["pages_new"] == 3
    assert [d.status_state for d in embedded.documents(workspace_id)] == ["ready"] * 3
    assert page_change_rows(embedded, pipeline_id) == sorted((url, "new") for url in urls)
    assert [embedded.web.hits(f"/p{n}") for n in range(3)] == [1, 1, 1]
    assert embedded.charges(workspace_id) == (1, 1)
    tags = embedded.instance.get_run_by_id(result.run_id).tags
    assert (tags["pipeline_id"], tags["workspace_id"], tags["trigger"], tags["pipeline_name"]) == (
        str(pipeline_id),
        str(workspace_id),
        "manual",
        "p",
    )
    # The name beside the partition key in every materialization; ids as text, which Dagster does not plot.
    for asset in ("crawl_results", "kb_documents", "page_changes"):
        assert materialization(result, asset)["pipeline_name"] == "p"
    crawl = embedded.instance.fetch_materializations(dg.AssetKey("crawl_results"), limit=1).records[0]
    shown = crawl.asset_materialization.metadata
    assert isinstance(shown["pipeline_id"], dg.TextMetadataValue) and shown["pipeline_id"].value == str(pipeline_id)
    assert isinstance(shown["workspace_id"], dg.TextMetadataValue)


def test_the_whole_graph_leaves_indexing_and_changes_to_their_own_steps(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2))
    result = launch(embedded, pipeline_id, ASSETS)
    assert result.success
    logged = steps_of(result)
    assert (logged["kb_documents"], logged["page_changes"], logged["kb_documents_have_content"]) == (
        "kb_documents",
        "page_changes",
        "kb_documents_kb_documents_have_content",
    )
    assert len(embedded.documents(workspace_id)) == 2 and len(page_change_rows(embedded, pipeline_id)) == 2


def test_a_raw_pipeline_crawled_alone_records_changes_and_writes_no_documents(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2), save_to_kb=False, folder=None)
    result = launch(embedded, pipeline_id, [crawl_results])
    assert result.success
    assert {event.asset_key.to_user_string() for event in result.get_asset_materialization_events()} == {
        "crawl_results",
        "page_changes",
    }
    assert embedded.documents(workspace_id) == [] and len(page_change_rows(embedded, pipeline_id)) == 2


def test_indexing_that_fails_after_the_crawl_fails_the_run_without_crawling_again(
    embedded: Stack, monkeypatch: pytest.MonkeyPatch
):
    import pipelines_dagster.assets.kb_documents as module

    def broken(*args, **kwargs):
        raise RuntimeError("documents table is locked")

    monkeypatch.setattr(module, "index_crawl", broken)
    _workspace_id, pipeline_id = embedded.pipeline(embedded.site(2))
    result = launch(embedded, pipeline_id, [crawl_results])
    assert not result.success
    message = failure_message(result)
    assert "the crawl is stored, but kb_documents: RuntimeError: documents table is locked" in message
    assert "materialize the failed asset" in message
    # The step's retry policy does not crawl again; the timeline still follows the crawl.
    assert embedded.web.hits("/p0") == embedded.web.hits("/p1") == 1
    assert materialization(result, "crawl_results")["urls_succeeded"] == 2
    assert len(page_change_rows(embedded, pipeline_id)) == 2
    [observation] = [
        event.asset_observation_data.asset_observation
        for event in result.all_events
        if event.event_type_value == "ASSET_OBSERVATION"
    ]
    assert observation.asset_key == kb_documents.key and "locked" in observation.metadata[ERROR_METADATA].value
