"""Asset checks pass and fail on real crawls, and failing leaves the data as it was."""

from __future__ import annotations

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Document, Pipeline
from pipelines_dagster.assets.checks import (
    asset_checks,
    crawl_blob_readable,
    crawl_success_ratio,
    kb_documents_have_content,
)
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.partitions import pipelines_partitions
from pipelines_dagster.runs import run_tags
from tests.assets.conftest import Stack, materialization


def run_checks(
    stack: Stack, workspace_id: int, pipeline_id: int, *, only: list | None = None, succeeds: bool = True
) -> dict[str, dg.AssetCheckEvaluation]:
    """Crawl and index with every check, or run just the checks in `only` over what is stored; the run
    succeeds unless a blocking check fails."""
    selection = dg.AssetSelection.checks(*only) if only else dg.AssetSelection.all(include_sources=False)
    job = dg.define_asset_job("checks", selection=selection, partitions_def=pipelines_partitions)
    defs = dg.Definitions(
        assets=[crawl_results, kb_documents], asset_checks=asset_checks, jobs=[job], resources=stack.resources()
    )
    # A checks-only selection has no asset to take the partitions from, so the partition goes in as
    # the tag the UI's launchpad sets.
    result = defs.resolve_job_def("checks").execute_in_process(
        instance=stack.instance,
        tags={
            **run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
            "dagster/partition": stack.key(pipeline_id),
        },
        raise_on_error=False,
    )
    assert result.success is succeeds
    return {evaluation.check_name: evaluation for evaluation in result.get_asset_check_evaluations()}


def test_every_check_passes_on_a_good_crawl(stack: Stack):
    workspace_id, pipeline_id = stack.pipeline(stack.site(3))
    checks = run_checks(stack, workspace_id, pipeline_id)
    assert {name: check.passed for name, check in checks.items()} == {
        "crawl_success_ratio": True,
        "crawl_blob_readable": True,
        "kb_documents_have_content": True,
    }
    assert checks["crawl_success_ratio"].metadata["success_ratio"].value == 1.0
    assert checks["crawl_blob_readable"].description.endswith("holds 3 records")
    assert checks["kb_documents_have_content"].metadata["documents_ready"].value == 3


def test_an_unhealthy_crawl_fails_the_blocking_ratio_check_and_its_recorded_verdict_stands(embedded: Stack):
    urls = [*embedded.site(1), embedded.web.url("/missing-1"), embedded.web.url("/missing-2")]
    workspace_id, pipeline_id = embedded.pipeline(urls)
    checks = run_checks(embedded, workspace_id, pipeline_id, succeeds=False)
    ratio = checks["crawl_success_ratio"]
    assert not ratio.passed and ratio.severity == dg.AssetCheckSeverity.ERROR and ratio.blocking
    assert ratio.description == "1 of 3 URLs succeeded (33%), under the threshold of 80%"
    # The one threshold, the pipeline's, shown with the check's result.
    assert ratio.metadata["min_success_ratio"].value == 0.8
    # Blocked: kb_documents and its check did not run on the crawl.
    assert "kb_documents_have_content" not in checks
    # A threshold lowered afterwards does not rewrite the crawl's verdict; the next crawl is judged by it.
    with transaction(embedded.sessions) as session:
        session.get(Pipeline, pipeline_id).config = {"MIN_SUCCESS_RATIO": 0.25}
    again = run_checks(embedded, workspace_id, pipeline_id, only=[crawl_success_ratio], succeeds=False)
    assert not again["crawl_success_ratio"].passed
    judged_anew = run_checks(embedded, workspace_id, pipeline_id)["crawl_success_ratio"]
    assert judged_anew.passed and judged_anew.metadata["min_success_ratio"].value == 0.25
    assert judged_anew.description == "1 of 3 URLs succeeded (33%); the threshold is 25%"


def test_a_missing_or_corrupt_blob_fails_and_is_left_alone(stack: Stack):
    workspace_id, pipeline_id = stack.pipeline(stack.site(2))
    result = stack.run(pipeline_id, workspace_id)
    blob_key = materialization(result, "crawl_results")["blob_key"]
    for stored, problem in [
        (b'{"url": "https://x.test/", "status": "success"}\n{not json\n', "is not valid JSON Lines"),
        (b'{"url": "https://x.test/"}\n', "holds a line that is not a crawl record"),
    ]:
        stack.blob.write_stream(blob_key, [stored])
        corrupt = run_checks(stack, workspace_id, pipeline_id, only=[crawl_blob_readable])["crawl_blob_readable"]
        assert not corrupt.passed and corrupt.severity == dg.AssetCheckSeverity.ERROR
        assert problem in corrupt.description
        assert b"".join(stack.blob.open_stream(blob_key)) == stored
    stack.blob.delete(blob_key)
    missing = run_checks(stack, workspace_id, pipeline_id, only=[crawl_blob_readable])["crawl_blob_readable"]
    assert not missing.passed and "is missing from the blob store" in missing.description
    assert not stack.blob.exists(blob_key)


def test_a_ready_document_without_content_fails(embedded: Stack):
    urls = embedded.site(3)
    workspace_id, pipeline_id = embedded.pipeline(urls)
    assert embedded.run(pipeline_id, workspace_id).success
    with transaction(embedded.sessions) as session:
        session.execute(sa.update(Document).where(Document.url == urls[1]).values(content="  \n"))
    before = [(d.url, d.content, d.status_state) for d in embedded.documents(workspace_id)]
    check = run_checks(embedded, workspace_id, pipeline_id, only=[kb_documents_have_content])[
        "kb_documents_have_content"
    ]
    assert not check.passed and check.description == "1 of 3 ready documents have no content"
    assert urls[1] in check.metadata["empty_urls"].value
    assert [(d.url, d.content, d.status_state) for d in embedded.documents(workspace_id)] == before


def test_checks_before_any_crawl_fail_with_what_to_do(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    checks = run_checks(embedded, workspace_id, pipeline_id, only=[crawl_success_ratio, crawl_blob_readable])
    assert all(not check.passed and "materialize crawl_results first" in check.description for check in checks.values())
