"""`page_changes[pipeline]`: the partition's latest stored crawl compared page by page with the last good one.

Appends new, changed and removed pages to the app DB's timeline; reads the blob, never the web.
Removals follow the crawl's recorded health: none after an unhealthy crawl, only pages answering
404/410 after an incomplete one.
"""

from typing import Any

import dagster as dg

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.assets.partition import CrawlSource, newest_crawl, partition_pipeline
from pipelines_dagster.core.crawl.record import read_crawl
from pipelines_dagster.core.kb.changes import ChangeCounts, record_changes
from pipelines_dagster.crawl_metadata import CRAWL_RESULTS
from pipelines_dagster.partitions import pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.resources.notifications import NotificationsResource
from pipelines_dagster.runs import PAGE_CHANGES_ASSET

# The UI renders metadata inline; a crawl of thousands of pages lists its first changes only.
MAX_LISTED_CHANGES = 50


def _changes_table(counts: ChangeCounts) -> str:
    if not counts.changes:
        return "none"
    rows = [f"| {url.replace('|', '%7C')} | {status} |" for url, status in counts.changes[:MAX_LISTED_CHANGES]]
    more = len(counts.changes) - MAX_LISTED_CHANGES
    return "\n".join(["| URL | change |", "|---|---|", *rows, *([f"\n{more} more"] if more > 0 else [])])


def changes_partition(
    pipeline: Pipeline,
    crawl: CrawlSource,
    *,
    app_db: AppDatabaseResource,
    blob_store: BlobStoreResource,
    notifications: NotificationsResource,
) -> dict[str, Any]:
    """Record the page changes of the pipeline's stored crawl, and queue their pages.changed
    notifications with them; the metadata of that materialization."""
    health = crawl.metadata.health(pipeline.config)
    counts = record_changes(
        app_db.sessions,
        workspace_id=pipeline.workspace_id,
        pipeline_id=pipeline.id,
        run_id=crawl.run_id,
        records=read_crawl(blob_store.store(), crawl.blob_key),
        health=health,
        on_recorded=notifications.pages_changed(
            workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, run_id=crawl.run_id
        ),
    )
    return {
        "pipeline_name": pipeline.name,
        "pages_new": counts.new,
        "pages_changed": counts.changed,
        "pages_same": counts.same,
        "pages_removed": counts.removed,
        "pages_skipped": counts.skipped,
        "pages_already_recorded": counts.already_recorded,
        "changes": dg.MetadataValue.md(_changes_table(counts)),
        "crawl_health": health.why,
        "source_blob_key": crawl.blob_key,
        "source_crawl_run_id": crawl.run_id,
    }


@dg.asset(
    name=PAGE_CHANGES_ASSET,
    partitions_def=pipelines_partitions,
    deps=[CRAWL_RESULTS],
    kinds={"python"},
    description=__doc__,
)
def page_changes(
    context: dg.AssetExecutionContext,
    app_db: AppDatabaseResource,
    blob_store: BlobStoreResource,
    notifications: NotificationsResource,
) -> dg.MaterializeResult[Any]:
    pipeline = partition_pipeline(app_db, context.partition_key)
    crawl = newest_crawl(context.instance, context.partition_key)
    return dg.MaterializeResult(
        metadata=changes_partition(pipeline, crawl, app_db=app_db, blob_store=blob_store, notifications=notifications)
    )
