"""`crawl_results[pipeline]`: one crawl of a pipeline's URLs, stored as a JSON Lines blob and billed once."""

import time
from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from pipelines_dagster.assets.after_crawl import Event, PartitionSteps, run_steps
from pipelines_dagster.assets.partition import latest_crawl_blob, partition_pipeline, refused
from pipelines_dagster.core.run_engine import CrawlReport, RunRefused, execute_crawl, load_plan
from pipelines_dagster.core.triggers import trigger_payload
from pipelines_dagster.partitions import pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.resources.crawler import CrawlerResource
from pipelines_dagster.resources.locks import LocksResource
from pipelines_dagster.runs import missing_run_tags

# Safe to retry: the charge is keyed by the root run, documents are upserts, and the
# blob is replaced whole. Guard failures are marked not retryable.
CRAWL_RETRY_POLICY = dg.RetryPolicy(
    max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


def _run_ended(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether `run_id` names a run that has ended, so a lock it still owns was left by its dead process."""
    run = instance.get_run_by_id(run_id)
    return run is not None and run.is_finished


def _failed_urls_table(report: CrawlReport) -> str:
    rows = [f"| {url} | {reason.replace('|', '/')} |" for url, reason in report.failed_urls]
    return "\n".join(["| URL | reason |", "|---|---|", *rows]) if rows else "none"


def crawl_partition(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    partition_key: str,
    *,
    app_db: AppDatabaseResource,
    locks: LocksResource,
    billing: BillingResource,
    blob_store: BlobStoreResource,
    crawler: CrawlerResource,
    trigger_tags: Mapping[str, str],
    log: dg.DagsterLogManager,
) -> dict[str, Any]:
    """Crawl one pipeline's partition within `run`; the metadata of its materialization.

    Raises a Failure that is not retried when a guard refuses the crawl. `trigger_tags` say what
    fired it (a webhook delivery or an event id), so its payload is shown with the crawl.
    """
    started_at = time.time()
    pipeline_id = int(partition_key)
    try:
        plan = load_plan(app_db.engine, pipeline_id)
    except RunRefused as exc:
        raise refused(str(exc)) from None
    previous = latest_crawl_blob(instance, partition_key)
    # Keyed by the root run, so a retried step or a re-executed run charges once.
    charge_key = f"crawl:{run.root_run_id or run.run_id}:{partition_key}"
    try:
        report = execute_crawl(
            plan,
            run_id=run.run_id,
            charge_key=charge_key,
            locks=locks.locks,
            billing=billing.billing,
            blob_store=blob_store.store(),
            crawler=crawler.crawler,
            previous_blob_key=previous[0] if previous else None,
            run_ended=lambda owner: _run_ended(instance, owner),
        )
    except RunRefused as exc:
        raise refused(str(exc)) from None
    if report.lock_lost:
        log.warning(f"pipeline {pipeline_id}: a lock expired during the crawl; another run may have overlapped it")
    metadata: dict[str, Any] = {
        "pipeline_id": plan.pipeline_id,
        "workspace_id": plan.workspace_id,
        "urls_attempted": report.attempted,
        "urls_succeeded": report.succeeded,
        "urls_empty": report.empty,
        "urls_failed": report.failed,
        "urls_unchanged": report.unchanged,
        "bytes": report.bytes_written,
        "blob_key": report.blob_key,
        "blob_url": dg.MetadataValue.url(report.blob_url),
        "charged_micros": report.charged_micros,
        "started_at": dg.MetadataValue.timestamp(started_at),
        "duration_seconds": round(report.duration_seconds, 3),
        "failed_urls": dg.MetadataValue.md(_failed_urls_table(report)),
        "previous_crawl_run_id": previous[1] if previous else "",
    }
    with app_db.sessions() as session:
        payload = trigger_payload(session, trigger_tags)
    if payload is not None:
        metadata["trigger_payload"] = (
            dg.MetadataValue.json(payload) if isinstance(payload, dict | list) else str(payload)[:4096]
        )
    if not plan.save_to_kb:
        metadata["kb_documents"] = "skipped: this pipeline keeps the raw crawl only (save to KB is off)"
    return metadata


def _tag_the_run(context: dg.AssetExecutionContext, app_db: AppDatabaseResource) -> None:
    """Give a run launched from the Dagster UI the run contract's tags, which history and triggers read."""
    pipeline = partition_pipeline(app_db, context.partition_key)
    missing = missing_run_tags(context.run.tags, pipeline_id=pipeline.id, workspace_id=pipeline.workspace_id)
    if missing:
        context.instance.add_run_tags(context.run.run_id, missing)


@dg.asset(
    partitions_def=pipelines_partitions,
    retry_policy=CRAWL_RETRY_POLICY,
    kinds={"python"},
    description=__doc__,
)
def crawl_results(
    context: dg.AssetExecutionContext,
    app_db: AppDatabaseResource,
    locks: LocksResource,
    billing: BillingResource,
    blob_store: BlobStoreResource,
    crawler: CrawlerResource,
) -> Iterator[dg.MaterializeResult | Event]:
    _tag_the_run(context, app_db)
    crawl = crawl_partition(
        context.instance,
        context.run,
        context.partition_key,
        app_db=app_db,
        locks=locks,
        billing=billing,
        blob_store=blob_store,
        crawler=crawler,
        trigger_tags=context.run.tags,
        log=context.log,
    )
    yield dg.MaterializeResult(metadata=crawl)
    # What the run does not execute as steps of its own follows here, from the blob just stored.
    steps = PartitionSteps(context.instance, context.partition_key, app_db=app_db, blob_store=blob_store,
                           log=context.log)
    yield from steps.after_crawl(crawl, executed=run_steps(context))
    if steps.errors:
        raise dg.Failure(
            description=f"the crawl is stored, but {'; '.join(steps.errors)}; materialize the failed asset "
            "for this partition to build it from the stored crawl, without crawling again",
            allow_retries=False,
        )
