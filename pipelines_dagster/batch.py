"""`pipeline_batch`: the scheduled fires of many pipelines in one Dagster run.

A Dagster run costs about a CPU-second before its first step (a process, imports, run records),
so at thousands of scheduled pipelines the runs, not the crawls, would fill a machine. A batch run
works through its pipelines one after another with the same code as `pipeline_run`'s steps and
logs, for each pipeline, its own materializations of crawl_results, kb_documents and page_changes
(under the pipeline's partition key, which its config names) and its own check results. Each
pipeline keeps its own charge (keyed by run and pipeline), its own locks (one crawl at a time per
pipeline) and its own entry in run history. A pipeline that fails is logged as failed (an
observation of the asset it failed at, with the error) and the batch goes on; the run fails at the
end, naming the pipelines that failed.
"""

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import dagster as dg
import pydantic

from pipelines_dagster.assets.after_crawl import Event, PartitionSteps, error_message
from pipelines_dagster.assets.crawl_results import crawl_partition, retry_plan
from pipelines_dagster.core.catalog.pipelines import pipeline_partitions
from pipelines_dagster.core.triggers.scheduler import ScheduledFire
from pipelines_dagster.crawl_metadata import CRAWL_RESULTS
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.resources.crawler import CrawlerResource
from pipelines_dagster.resources.locks import LocksResource
from pipelines_dagster.resources.notifications import NotificationsResource
from pipelines_dagster.runs import (
    PIPELINE_BATCH_JOB,
    PIPELINE_BATCH_OP,
    TRIGGER_TAG,
    Trigger,
    batch_run_key,
    batch_tags,
    partition_of,
)

T = TypeVar("T")


class BatchPipeline(dg.Config):
    pipeline_id: int
    workspace_id: int
    partition_key: str | None = pydantic.Field(
        default=None, description="The pipeline's partition key; read from the catalog when not given."
    )
    scheduled_for: str | None = pydantic.Field(default=None, description="The fire time, for scheduled fires.")


class PipelineBatchConfig(dg.Config):
    pipelines: list[BatchPipeline] = pydantic.Field(min_length=1, description="The pipelines to run, in order.")


def _with_retries(call: Callable[[int], T], *, log: dg.DagsterLogManager, what: str) -> T:
    """`call(attempt)`, retried under the pipeline's retry policy as `pipeline_run` retries its crawl
    step; a refusal is not retried, and the error of the last attempt is raised."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return call(attempt)
        except dg.Failure:
            raise
        except Exception as exc:
            policy, cause = retry_plan(exc)
            if attempt > policy.max_retries:
                raise cause from None
            delay = policy.delay(attempt)
            log.warning(
                f"{what}: attempt {attempt} failed ({error_message(cause)}); retrying in {delay:g} s "
                f"({policy.backoff.value} backoff, retry {attempt} of {policy.max_retries})"
            )
            time.sleep(delay)


def _run_member(
    context: dg.OpExecutionContext, pipeline: BatchPipeline, resources: dict[str, Any], steps: PartitionSteps
) -> Iterator[Event]:
    """One pipeline of a batch run: its crawl and everything that follows it, as events to log."""
    try:
        crawled = _with_retries(
            lambda attempt: crawl_partition(
                context.instance,
                context.run,
                steps.key,
                **resources,
                trigger_tags={},
                log=context.log,
                log_event=context.log_event,
                attempt=attempt,
            ),
            log=context.log,
            what=f"pipeline {pipeline.pipeline_id}: crawl_results",
        )
    except Exception as exc:
        yield steps.failed(CRAWL_RESULTS, exc)
        return
    if pipeline.scheduled_for:
        crawled.metadata["scheduled_for"] = pipeline.scheduled_for
    yield dg.AssetMaterialization(asset_key=CRAWL_RESULTS, partition=steps.key, metadata=crawled.metadata)
    yield from steps.after_crawl(crawled.pipeline, crawled.source)


@dg.op(
    name=PIPELINE_BATCH_OP,
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
    notifications: NotificationsResource,
) -> Iterator[Event]:
    resources = {"app_db": app_db, "locks": locks, "billing": billing, "blob_store": blob_store, "crawler": crawler}
    failed: dict[int, list[str]] = {}
    # The schedule sensor names each member's key; a batch launched by hand may not.
    unnamed = [pipeline.pipeline_id for pipeline in config.pipelines if pipeline.partition_key is None]
    with app_db.sessions() as session:
        keys = pipeline_partitions(session, unnamed)
    for pipeline in config.pipelines:
        steps = PartitionSteps(
            pipeline.partition_key or partition_of(keys, pipeline.pipeline_id),
            app_db=app_db,
            blob_store=blob_store,
            notifications=notifications,
            log=context.log,
        )
        yield from _run_member(context, pipeline, resources, steps)
        if steps.errors:
            failed[pipeline.pipeline_id] = steps.errors
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
    name=PIPELINE_BATCH_JOB,
    tags={TRIGGER_TAG: Trigger.SCHEDULED.value},
    description=(
        "Run many pipelines' scheduled fires in one run; each pipeline's partitions are materialized as by "
        "pipeline_run."
    ),
)
def pipeline_batch() -> None:
    run_pipelines()


def batch_run_request(fires: Sequence[ScheduledFire], keys: Mapping[int, str]) -> dg.RunRequest:
    """One `pipeline_batch` run for these fires, its members in pipeline order (as its tags list them), each
    with its partition key from `keys`; the same fires always make the same run key."""
    fires = sorted(fires, key=lambda fire: fire.pipeline_id)
    config = PipelineBatchConfig(
        pipelines=[
            BatchPipeline(
                pipeline_id=fire.pipeline_id,
                workspace_id=fire.workspace_id,
                partition_key=partition_of(keys, fire.pipeline_id),
                scheduled_for=fire.scheduled_for.isoformat(),
            )
            for fire in fires
        ]
    )
    return dg.RunRequest(
        run_key=batch_run_key(fire.run_key for fire in fires),
        job_name=pipeline_batch.name,
        run_config=dg.RunConfig(ops={PIPELINE_BATCH_OP: config}),
        tags=batch_tags(((fire.pipeline_id, fire.workspace_id) for fire in fires), trigger=Trigger.SCHEDULED),
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
