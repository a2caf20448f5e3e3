"""What follows a pipeline's crawl inside the step that crawled it: the crawl's checks, kb_documents and page_changes.

A batch run does all of them for each of its pipelines. A run of crawl_results does those its run
does not execute as steps of their own (crawl_results alone from its asset page, a backfill of it,
a re-execution of its step), so the KB and the timeline follow every crawl, from the stored blob,
without a second crawl or charge. Each is logged as an event of its own asset, for the partition.

An unhealthy crawl (`core.crawl.health`) gets its checks and nothing else, and fails, as in
`pipeline_run`, where the blocking success-ratio check keeps kb_documents and page_changes from it.
"""

import time
from collections.abc import Collection, Iterable, Iterator

import dagster as dg

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.assets.checks import (
    blob_readable,
    check_evaluation,
    crawl_blob_readable,
    crawl_success_ratio,
    documents_have_content,
    kb_documents_have_content,
    success_ratio,
)
from pipelines_dagster.assets.kb_documents import index_partition, kb_documents, saves_to_kb
from pipelines_dagster.assets.page_changes import changes_partition, page_changes
from pipelines_dagster.assets.partition import CrawlSource
from pipelines_dagster.crawl_metadata import CRAWL_RESULTS
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.resources.notifications import NotificationsResource
from pipelines_dagster.runs import ERROR_METADATA, FAILED_STEP_METADATA

Event = dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation


def steps_executed(job_steps: Iterable[str], step_keys_to_execute: Collection[str] | None) -> frozenset[str]:
    """The steps a run executes: its job's (a run of selected assets has a job of only those and
    their checks), narrowed to its step selection (a re-execution of some steps) when it has one."""
    steps = frozenset(job_steps)
    return steps if step_keys_to_execute is None else steps & frozenset(step_keys_to_execute)


def run_steps(context: dg.AssetExecutionContext) -> frozenset[str]:
    """The steps the context's run executes; an asset's or check's step key is its node's name."""
    return steps_executed(context.job_def.graph.node_names(), context.run.step_keys_to_execute)


def error_message(error: BaseException) -> str:
    # A dg.Failure's description is the sentence written for the user.
    if isinstance(error, dg.Failure) and error.description:
        return error.description
    return f"{type(error).__name__}: {error}"


class PartitionSteps:
    """One pipeline partition's steps done inside another step, as the events to log; a step that
    fails is logged as an observation of its asset, with the error, and the others go on."""

    def __init__(
        self,
        partition_key: str,
        *,
        app_db: AppDatabaseResource,
        blob_store: BlobStoreResource,
        notifications: NotificationsResource,
        log: dg.DagsterLogManager,
    ) -> None:
        self.key = partition_key
        self.app_db = app_db
        self.blob_store = blob_store
        self.notifications = notifications
        self.log = log
        self.errors: list[str] = []
        self.unhealthy: str | None = None
        """What the partition fails with when its crawl is unhealthy and no check step of the run fails it."""
        self.started_at = time.time()

    def failed(self, asset_key: dg.AssetKey, error: Exception) -> dg.AssetObservation:
        message = error_message(error)
        self.errors.append(f"{asset_key.to_user_string()}: {message}")
        self.log.error(f"pipeline {self.key}: {asset_key.to_user_string()} failed: {message}")
        return dg.AssetObservation(
            asset_key=asset_key,
            partition=self.key,
            metadata={
                FAILED_STEP_METADATA: asset_key.to_user_string(),
                ERROR_METADATA: message,
                "started_at": dg.MetadataValue.timestamp(self.started_at),
            },
        )

    def after_crawl(self, pipeline: Pipeline, crawl: CrawlSource, *, executed: Collection[str] = ()) -> Iterator[Event]:
        """What follows the crawl the step just materialized and is not in `executed`, the steps the
        run executes itself: the crawl's checks, kb_documents with its check, and page_changes.

        They read the pipeline row the crawl loaded and the crawl it stored, as it handed them on:
        not the app database or the event log again."""
        key, app_db, blob_store = self.key, self.app_db, self.blob_store
        stored = crawl.metadata
        health = stored.verdict
        assert health is not None, "crawl_partition records the verdict with every crawl"

        def pending(definition: dg.AssetsDefinition | dg.AssetChecksDefinition) -> bool:
            return definition.node_def.name not in executed

        if pending(crawl_success_ratio):
            yield check_evaluation(crawl_success_ratio, success_ratio(key, stored, pipeline.config), key)
        # The URLs the blob check read: kb_documents creates its pending rows from them, not from another read.
        urls: list[str] | None = None
        if pending(crawl_blob_readable):
            readable, urls = blob_readable(key, stored, blob_store)
            yield check_evaluation(crawl_blob_readable, readable, key)
        if not health.healthy:
            if pending(kb_documents) or pending(page_changes):
                self.log.warning(f"pipeline {key}: kb_documents and page_changes skipped: the crawl is unhealthy")
            if pending(crawl_success_ratio):  # else the run's own check step fails it
                self.unhealthy = health.failure
                yield self.failed(CRAWL_RESULTS, dg.Failure(description=health.failure))
            return
        if pending(kb_documents) and saves_to_kb(pipeline, self.log):
            try:
                documents = index_partition(
                    pipeline, crawl, app_db=app_db, blob_store=blob_store, log=self.log, urls=urls
                )
            except Exception as exc:
                yield self.failed(kb_documents.key, exc)
            else:
                yield dg.AssetMaterialization(asset_key=kb_documents.key, partition=key, metadata=documents)
                if pending(kb_documents_have_content):
                    yield check_evaluation(kb_documents_have_content, documents_have_content(key, app_db), key)
        if pending(page_changes):
            try:
                changes = changes_partition(
                    pipeline, crawl, app_db=app_db, blob_store=blob_store, notifications=self.notifications
                )
            except Exception as exc:
                yield self.failed(page_changes.key, exc)
            else:
                yield dg.AssetMaterialization(asset_key=page_changes.key, partition=key, metadata=changes)
