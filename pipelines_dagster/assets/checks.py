"""Data-quality checks shown in the Dagster UI next to each pipeline partition; they read, never write."""

import json
import warnings
from collections.abc import Mapping
from typing import Any

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.models import Document, DocumentState, Pipeline
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.partition import partition_pipeline_id
from pipelines_dagster.core.crawl.health import succeeded_share, success_threshold
from pipelines_dagster.core.crawl.record import CrawlRecordError, read_crawl
from pipelines_dagster.core.storage.blob import BlobNotFoundError
from pipelines_dagster.crawl_metadata import CRAWL_RESULTS, CrawlMetadata, latest_crawl
from pipelines_dagster.partitions import pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.blob_store import BlobStoreResource

MAX_LISTED = 20

# One check result per pipeline needs a partitioned check, which Dagster 1.13 still calls preview; known and
# wanted, so its warning is not printed by every process that loads the checks.
warnings.filterwarnings(
    "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
)


def _latest_crawl(instance: dg.DagsterInstance, partition_key: str) -> CrawlMetadata | None:
    latest = latest_crawl(instance, partition_key)
    return latest.metadata if latest else None


def _no_crawl(partition_key: str, severity: dg.AssetCheckSeverity) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=False,
        severity=severity,
        description=f"pipeline {partition_key} has no stored crawl; materialize crawl_results first",
    )


def _pipeline_config(app_db: AppDatabaseResource, partition_key: str) -> Mapping[str, Any]:
    """The partition's pipeline config; none for a pipeline deleted since its crawl."""
    with app_db.sessions() as session:
        pipeline = session.get(Pipeline, partition_pipeline_id(partition_key))
    return pipeline.config if pipeline else {}


def success_ratio(
    partition_key: str, crawl: CrawlMetadata | None, pipeline_config: Mapping[str, Any]
) -> dg.AssetCheckResult:
    """Whether the crawl (materialization metadata) is healthy, as judged when it was stored: its
    success ratio at the pipeline's threshold, its start URLs or its list not failed as a whole."""
    if crawl is None:
        return _no_crawl(partition_key, dg.AssetCheckSeverity.WARN)
    health = crawl.health(pipeline_config)
    attempted = crawl.urls_attempted or 0
    ratio = succeeded_share(succeeded=crawl.urls_succeeded or 0, attempted=attempted)
    # The one threshold: the pipeline's own (its config's MIN_SUCCESS_RATIO), as the crawl was judged at it.
    threshold = crawl.min_success_ratio if crawl.min_success_ratio is not None else success_threshold(pipeline_config)
    return dg.AssetCheckResult(
        passed=health.healthy,
        # ERROR is what blocks: the steps after the check do not run on an unhealthy crawl.
        severity=dg.AssetCheckSeverity.WARN if health.healthy else dg.AssetCheckSeverity.ERROR,
        description=health.why,
        metadata={
            "success_ratio": round(ratio, 4),
            "urls_attempted": attempted,
            "crawl_complete": health.complete,
            "min_success_ratio": threshold,
        },
    )


def blob_readable(
    partition_key: str, crawl: CrawlMetadata | None, blob_store: BlobStoreResource
) -> tuple[dg.AssetCheckResult, list[str] | None]:
    """Whether the crawl's blob is stored and holds one JSON record per attempted URL; and, when every
    line read back, the crawl's URLs in stored order, which is all the KB index's pending rows need:
    handed on, they spare it a read of the whole blob, at the cost of the URLs alone in memory."""
    if crawl is None or not crawl.blob_key:
        return _no_crawl(partition_key, dg.AssetCheckSeverity.ERROR), None
    blob_key = crawl.blob_key
    urls: list[str] | None = None
    try:
        urls = [record.url for record in read_crawl(blob_store.store(), blob_key)]
    except BlobNotFoundError:
        problem: str | None = "is missing from the blob store; re-run crawl_results to store a new crawl"
    except json.JSONDecodeError as exc:  # orjson reports bad UTF-8 this way too
        problem = f"is not valid JSON Lines ({exc}); re-run crawl_results to replace it"
    except CrawlRecordError as exc:
        problem = f"holds a line that is not a crawl record ({exc}); re-run crawl_results to replace it"
    else:
        records, expected = len(urls), crawl.urls_attempted
        problem = None if records == expected else f"holds {records} records, the crawl attempted {expected} URLs"
    result = dg.AssetCheckResult(
        passed=problem is None,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{blob_key} {problem}" if problem else f"{blob_key} holds {records} records",
        metadata={"blob_key": blob_key},
    )
    return result, urls


def _blank(column: sa.SQLColumnExpression[str | None]) -> sa.ColumnElement[bool]:
    """NULL or only whitespace; trim() strips spaces alone on SQLite and PostgreSQL, so the rest become spaces."""
    text: sa.ColumnElement[str] = sa.func.coalesce(column, "")
    for whitespace in ("\n", "\r", "\t"):
        text = sa.func.replace(text, whitespace, " ")
    return sa.func.trim(text) == ""


def documents_have_content(partition_key: str, app_db: AppDatabaseResource) -> dg.AssetCheckResult:
    """Whether every ready document of the pipeline has text."""
    with app_db.sessions() as session:
        ready = (Document.pipeline_id == partition_pipeline_id(partition_key)) & (
            Document.status_state == DocumentState.READY.value
        )
        total = session.scalar(sa.select(sa.func.count()).select_from(Document).where(ready))
        empty = list(
            session.scalars(sa.select(Document.url).where(ready, _blank(Document.content)).order_by(Document.id))
        )
    return dg.AssetCheckResult(
        passed=not empty,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            f"{len(empty)} of {total} ready documents have no content"
            if empty
            else f"all {total} ready documents have content"
        ),
        metadata={
            "documents_ready": total,
            "documents_empty": len(empty),
            "empty_urls": dg.MetadataValue.md("\n".join(f"- {url}" for url in empty[:MAX_LISTED]) or "none"),
        },
    )


@dg.asset_check(
    asset=CRAWL_RESULTS,
    partitions_def=pipelines_partitions,
    # An unhealthy crawl fails it with ERROR: kb_documents and page_changes do not run on the crawl, and the run fails.
    blocking=True,
    description="The crawl is healthy: at least the pipeline's own share of URLs succeeded (its success threshold, "
    "config MIN_SUCCESS_RATIO, default 80%; shown as min_success_ratio in each result), and its start URLs (or its "
    "list) did not all fail. An unhealthy crawl blocks kb_documents and page_changes.",
)
def crawl_success_ratio(context: dg.AssetCheckExecutionContext, app_db: AppDatabaseResource) -> dg.AssetCheckResult:
    crawl = _latest_crawl(context.instance, context.partition_key)
    config = _pipeline_config(app_db, context.partition_key) if crawl is not None else {}
    return success_ratio(context.partition_key, crawl, config)


@dg.asset_check(
    asset=CRAWL_RESULTS,
    partitions_def=pipelines_partitions,
    description="The newest crawl's blob exists and every line of it is a JSON record.",
)
def crawl_blob_readable(context: dg.AssetCheckExecutionContext, blob_store: BlobStoreResource) -> dg.AssetCheckResult:
    result, _ = blob_readable(context.partition_key, _latest_crawl(context.instance, context.partition_key), blob_store)
    return result


@dg.asset_check(
    asset=kb_documents,
    partitions_def=pipelines_partitions,
    description="Every ready document of the pipeline has non-empty content.",
)
def kb_documents_have_content(
    context: dg.AssetCheckExecutionContext, app_db: AppDatabaseResource
) -> dg.AssetCheckResult:
    return documents_have_content(context.partition_key, app_db)


asset_checks = [crawl_success_ratio, crawl_blob_readable, kb_documents_have_content]


def check_evaluation(
    check: dg.AssetChecksDefinition, result: dg.AssetCheckResult, partition_key: str
) -> dg.AssetCheckEvaluation:
    """A check's result as the event a job outside the asset graph logs for one partition."""
    [spec] = check.check_specs
    return dg.AssetCheckEvaluation(
        asset_key=check.check_key.asset_key,
        check_name=check.check_key.name,
        passed=result.passed,
        metadata=result.metadata,
        severity=result.severity,
        description=result.description,
        partition=partition_key,
        blocking=spec.blocking,
    )
