"""A backfill of kb_documents and page_changes over several partitions rebuilds from stored crawls alone."""

from __future__ import annotations

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import CreditLedgerEntry, Document
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.runs import run_tags
from tests.assets.conftest import Stack, materialization


def ledger_rows(stack: Stack) -> int:
    with stack.sessions() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(CreditLedgerEntry))


def test_a_backfill_over_three_partitions_reindexes_without_crawling_or_charging(embedded: Stack):
    embedded.billing_enabled = True
    pipelines = [embedded.pipeline(embedded.site(3, prefix=f"/s{n}-"), credit=10_000) for n in range(3)]
    for workspace_id, pipeline_id in pipelines:
        assert embedded.run(pipeline_id, workspace_id, assets=[crawl_results, kb_documents, page_changes]).success
    with transaction(embedded.sessions) as session:
        session.execute(sa.delete(Document))
    requests, ledger = len(embedded.web.requests), ledger_rows(embedded)

    # What a backfill launches: one run per partition of the selected assets, tagged with the backfill.
    backfill_id = "backfill-test"
    results = [
        dg.materialize(
            [crawl_results.to_source_asset(), kb_documents, page_changes],
            partition_key=embedded.key(pipeline_id),
            instance=embedded.instance,
            resources=embedded.resources(),
            tags={
                **run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
                "dagster/backfill": backfill_id,
            },
        )
        for workspace_id, pipeline_id in pipelines
    ]
    assert all(result.success for result in results)
    assert [materialization(result, "kb_documents")["documents_created"] for result in results] == [3, 3, 3]
    assert all(materialization(result, "page_changes")["pages_already_recorded"] == 3 for result in results)
    assert len(embedded.web.requests) == requests
    assert ledger_rows(embedded) == ledger
    for workspace_id, _ in pipelines:
        documents = embedded.documents(workspace_id)
        assert len(documents) == 3 and all(d.status_state == "ready" and d.content for d in documents)
    runs = embedded.instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    assert {run.tags["dagster/partition"] for run in runs} == {embedded.key(p) for _, p in pipelines}
