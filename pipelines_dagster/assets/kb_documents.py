"""`kb_documents[pipeline]`: the partition's latest stored crawl, upserted into its KB folder.

Reads the blob, never the web, so a backfill of this asset alone re-indexes
without crawling or charging. Pipelines that keep only the raw crawl skip it.
Documents whose page left the crawl are archived as far as the crawl's recorded
health allows: none after an unhealthy crawl, only pages answering 404/410 after
an incomplete one.
"""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.assets.partition import CrawlSource, newest_crawl, partition_pipeline
from pipelines_dagster.core.crawl.record import read_crawl
from pipelines_dagster.core.kb.archive import archive_missing
from pipelines_dagster.core.kb.index import Destination, IndexStats, index_crawl
from pipelines_dagster.crawl_metadata import CRAWL_RESULTS
from pipelines_dagster.partitions import pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.runs import KB_DOCUMENTS_ASSET


def saves_to_kb(pipeline: Pipeline, log: dg.DagsterLogManager) -> bool:
    """Whether the pipeline's crawls become documents; one that keeps the raw crawl only says so in the log."""
    if not pipeline.save_to_kb:
        log.info(f"pipeline {pipeline.id} keeps the raw crawl only; no documents to write")
    return pipeline.save_to_kb


def index_partition(
    pipeline: Pipeline,
    crawl: CrawlSource,
    *,
    app_db: AppDatabaseResource,
    blob_store: BlobStoreResource,
    log: dg.DagsterLogManager,
    urls: list[str] | None = None,
) -> dict[str, Any]:
    """Upsert the stored crawl into the pipeline's KB folder; the metadata of that materialization.
    `urls`: the crawl's URLs as its blob check read them, when it did."""
    store = blob_store.store()
    destination = Destination(
        workspace_id=pipeline.workspace_id,
        pipeline_id=pipeline.id,
        connector_id=pipeline.connector_id,
        folder_id=pipeline.destination_folder_id,
    )
    stats = index_crawl(app_db.sessions, destination, lambda: read_crawl(store, crawl.blob_key), urls=urls)
    archived = archive_left_pages(app_db, destination, pipeline, crawl, stats, log=log)
    return {
        "documents_created": stats.created,
        "documents_updated": stats.updated,
        "documents_unchanged": stats.unchanged,
        "documents_failed": stats.failed,
        "documents_archived": archived,
        "documents_restored": stats.restored,
        "pipeline_name": pipeline.name,
        # Text, not a number Dagster would plot.
        "folder_id": str(pipeline.destination_folder_id) if pipeline.destination_folder_id is not None else "root",
        "source_blob_key": crawl.blob_key,
        "source_crawl_run_id": crawl.run_id,
    }


def archive_left_pages(
    app_db: AppDatabaseResource,
    destination: Destination,
    pipeline: Pipeline,
    crawl: CrawlSource,
    stats: IndexStats,
    *,
    log: dg.DagsterLogManager,
) -> int:
    """Archive the documents whose page left, as far as the crawl's health allows; the number archived."""
    health = crawl.metadata.health(pipeline.config)
    if not health.removes_unseen:
        kept = (
            "only the documents of pages that answered 404/410 archived, the crawl cannot tell which others left"
            if health.removes_gone
            else "no documents archived, the crawl cannot tell which pages left"
        )
        log.info(f"pipeline {pipeline.id}: {kept}: {health.why}")
    return archive_missing(
        app_db.sessions,
        destination,
        health=health,
        crawled_urls=stats.crawled_urls,
        gone_urls=stats.gone_urls,
        run_id=crawl.run_id,
        now=datetime.now(UTC),
    )


@dg.asset(
    name=KB_DOCUMENTS_ASSET,
    partitions_def=pipelines_partitions,
    deps=[CRAWL_RESULTS],
    # Not materialized for a pipeline that does not save to the KB.
    output_required=False,
    kinds={"python"},
    description=__doc__,
)
def kb_documents(
    context: dg.AssetExecutionContext, app_db: AppDatabaseResource, blob_store: BlobStoreResource
) -> Iterator[dg.MaterializeResult[Any]]:
    pipeline = partition_pipeline(app_db, context.partition_key)
    if saves_to_kb(pipeline, context.log):
        crawl = newest_crawl(context.instance, context.partition_key)
        yield dg.MaterializeResult(
            metadata=index_partition(pipeline, crawl, app_db=app_db, blob_store=blob_store, log=context.log)
        )
