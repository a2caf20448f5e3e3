"""`pipeline_batch`: the scheduled fires of many pipelines in one Dagster run.

A Dagster run costs about a CPU-second before its first step (a process, imports, run records),
so at thousands of scheduled pipelines the runs, not the crawls, would fill a machine. A batch run
works through its pipelines one after another with the same code as `pipeline_run`'s steps and
logs, for each pipeline, its own materializations of crawl_results, kb_documents and page_changes
(partition = pipeline id) and its own check results. Each pipeline keeps its own charge (keyed by
run and partition), its own locks (one crawl at a time per pipeline) and its own entry in run
history. A pipeline that fails is logged as failed (an observation of the asset it failed at,
with the error) and the batch goes on; the run fails at the end, naming the pipelines that failed.
"""

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import dagster as dg
import pydantic

from pipelines_dagster.assets.checks import (
    DEFAULT_MIN_SUCCESS_RATIO,
    blob_readable,
    check_evaluation,
    crawl_blob_readable,
    crawl_success_ratio,
    documents_have_content,
    kb_documents_have_content,
    success_ratio,
)
from pipelines_dagster.assets.crawl_results import CRAWL_RESULTS, CRAWL_RETRY_POLICY, crawl_partition
from pipelines_dagster.assets.kb_documents import index_partition, kb_documents
from pipelines_dagster.assets.page_changes import changes_partition, page_changes
from pipelines_dagster.core.scheduler import Fire
from pipelines_dagster.jobs import batch_tags
from pipelines_dagster.partitions import partition_key
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.resources.crawler import CrawlerResource
from pipelines_dagster.resources.locks import LocksResource

OP_NAME = "run_pipelines"
# Metadata of the observation that records a pipeline's failure inside a batch run.
FAILED_STEP = "failed_step"
ERROR = "error"
T = TypeVar("T")


class BatchPipeline(dg.Config):
    pipeline_id: int
    workspace_id: int
    scheduled_for: str | None = pydantic.Field(default=None, description="The fire time, for scheduled fires.")


class PipelineBatchConfig(dg.Config):
    pipelines: list[BatchPipeline] = pydantic.Field(min_length=1, description="The pipelines to run, in order.")


def _message(error: Exception) -> str:
    # A dg.Failure's description is the sentence written for the user.
    if isinstance(error, dg.Failure) and error.description:
        return error.description
    return f"{type(error).__name__}: {error}"


def _with_retries(call: Callable[[], T], *, log: dg.DagsterLogManager, what: str) -> T:
    """`call()`, retried as `pipeline_run` retries its crawl step; a refusal is not retried."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except dg.Failure:
            raise
        except Exception as exc:
            if attempt > CRAWL_RETRY_POLICY.max_retries:
                raise
            delay = CRAWL_RETRY_POLICY.calculate_delay(attempt)
            log.warning(f"{what}: attempt {attempt} failed ({_message(exc)}); retrying in {delay:.1f} s")
            time.sleep(delay)


class _Member:
    """One pipeline of a batch run: its steps, as events to log, and the error that stopped any of them."""

    def __init__(self, context: dg.OpExecutionContext, pipeline: BatchPipeline, resources: dict[str, Any]) -> None:
        self.context = context
        self.pipeline = pipeline
        self.key = partition_key(pipeline.pipeline_id)
        self.resources = resources
        self.errors: list[str] = []
        self.started_at = time.time()

    def _failed(self, asset_key: dg.AssetKey, error: Exception) -> dg.AssetObservation:
        message = _message(error)
        self.errors.append(f"{asset_key.to_user_string()}: {message}")
        self.context.log.error(f"pipeline {self.pipeline.pipeline_id}: {asset_key.to_user_string()} failed: {message}")
        return dg.AssetObservation(
            asset_key=asset_key,
            partition=self.key,
            metadata={
                FAILED_STEP: asset_key.to_user_string(),
                ERROR: message,
                "started_at": dg.MetadataValue.timestamp(self.started_at),
            },
        )

    def run(self) -> Iterator[dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation]:
        context, key, resources = self.context, self.key, self.resources
        app_db, blob_store = resources["app_db"], resources["blob_store"]
        try:
            crawl = _with_retries(
                lambda: crawl_partition(
                    context.instance, context.run, key, **resources, trigger_tags={}, log=context.log
                ),
                log=context.log,
                what=f"pipeline {self.pipeline.pipeline_id}: crawl_results",
            )
        except Exception as exc:
            yield self._failed(CRAWL_RESULTS, exc)
            return
        if self.pipeline.scheduled_for:
            crawl["scheduled_for"] = self.pipeline.scheduled_for
        yield dg.AssetMaterialization(asset_key=CRAWL_RESULTS, partition=key, metadata=crawl)
        ratio = success_ratio(key, crawl, app_db, default_threshold=DEFAULT_MIN_SUCCESS_RATIO)
        yield check_evaluation(crawl_success_ratio, ratio, key)
        yield check_evaluation(crawl_blob_readable, blob_readable(key, crawl, blob_store), key)
        try:
            documents = index_partition(context.instance, key, app_db=app_db, blob_store=blob_store, log=context.log)
        except Exception as exc:
            yield self._failed(kb_documents.key, exc)
        else:
            if documents is not None:
                yield dg.AssetMaterialization(asset_key=kb_documents.key, partition=key, metadata=documents)
                yield check_evaluation(kb_documents_have_content, documents_have_content(key, app_db), key)
        try:
            changes = changes_partition(context.instance, key, app_db=app_db, blob_store=blob_store)
        except Exception as exc:
            yield self._failed(page_changes.key, exc)
        else:
            yield dg.AssetMaterialization(asset_key=page_changes.key, partition=key, metadata=changes)


@dg.op(
    name=OP_NAME,
    out={},
    description="Run each pipeline of the batch in turn: crawl_results, its checks, kb_documents and page_changes.",
)
def run_pipelines(
    context: dg.OpExecutionContext,
    config: PipelineBatchConfig,
    app_db: AppDatabaseResource,
    locks: LocksResource,
    billing: BillingResource,
    blob_store: BlobStoreResource,
    crawler: CrawlerResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation]:
    resources = {"app_db": app_db, "locks": locks, "billing": billing, "blob_store": blob_store, "crawler": crawler}
    failed: dict[int, list[str]] = {}
    for pipeline in config.pipelines:
        member = _Member(context, pipeline, resources)
        yield from member.run()
        if member.errors:
            failed[pipeline.pipeline_id] = member.errors
    total = len(config.pipelines)
    context.log.info(f"{total - len(failed)} of {total} pipelines succeeded")
    if failed:
        rows = [f"| {pipeline_id} | {'; '.join(errors).replace('|', '/')} |" for pipeline_id, errors in failed.items()]
        raise dg.Failure(
            description=f"{len(failed)} of {total} pipelines failed: {', '.join(map(str, failed))}; "
            "the others succeeded (see each pipeline's partition)",
            metadata={"failed_pipelines": dg.MetadataValue.md("\n".join(["| pipeline | error |", "|---|---|", *rows]))},
            allow_retries=False,
        )


@dg.job(
    name="pipeline_batch",
    tags={"trigger": "scheduled"},
    description="Run many pipelines' scheduled fires in one run; each pipeline's partitions are materialized as by pipeline_run.",
)
def pipeline_batch() -> None:
    run_pipelines()


def batch_run_request(fires: Sequence[Fire]) -> dg.RunRequest:
    """One `pipeline_batch` run for these fires; the same fires always make the same run key."""
    digest = hashlib.sha256("\n".join(sorted(fire.run_key for fire in fires)).encode()).hexdigest()[:24]
    config = PipelineBatchConfig(
        pipelines=[
            BatchPipeline(
                pipeline_id=fire.pipeline_id, workspace_id=fire.workspace_id, scheduled_for=fire.scheduled_for.isoformat()
            )
            for fire in fires
        ]
    )
    return dg.RunRequest(
        run_key=f"schedule-batch:{digest}",
        job_name=pipeline_batch.name,
        run_config=dg.RunConfig(ops={OP_NAME: config}),
        tags=batch_tags(((fire.pipeline_id, fire.workspace_id) for fire in fires), trigger="scheduled"),
    )


def split_evenly(items: Sequence[T], most: int) -> list[Sequence[T]]:
    """`items` in as few consecutive chunks of at most `most` as possible, of sizes that differ by one at most."""
    if most < 1:
        raise ValueError(f"most must be at least 1, got {most}")
    chunks = -(-len(items) // most)
    size, extra = divmod(len(items), chunks) if chunks else (0, 0)
    result, start = [], 0
    for index in range(chunks):
        end = start + size + (index < extra)
        result.append(items[start:end])
        start = end
    return result
