"""A pipeline's partition as every asset reads it: its pipeline, the stored crawl it builds on, a guard's refusal."""

from dataclasses import dataclass

import dagster as dg

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.crawl_metadata import CrawlMetadata, latest_crawl
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.runs import PartitionKeyError, pipeline_id_of_partition


def refused(reason: str) -> dg.Failure:
    return dg.Failure(description=reason, allow_retries=False)


@dataclass(frozen=True, kw_only=True)
class CrawlSource:
    """The stored crawl that kb_documents, page_changes and the checks read: the run that stored it,
    its blob and its metadata. The step that crawled hands on the crawl it just stored; a step of
    their own takes the partition's newest from the event log (`newest_crawl`)."""

    run_id: str
    blob_key: str
    metadata: CrawlMetadata


def newest_crawl(instance: dg.DagsterInstance, partition_key: str) -> CrawlSource:
    """The partition's newest stored crawl, from the event log; refused before the first."""
    latest = latest_crawl(instance, partition_key)
    if latest is None or latest.blob_key is None:
        raise refused(f"pipeline {partition_key} has no stored crawl yet; materialize crawl_results first")
    return CrawlSource(run_id=latest.run_id, blob_key=latest.blob_key, metadata=latest.metadata)


def partition_pipeline_id(partition_key: str) -> int:
    """The partition's pipeline; a partition that is none (added by hand in the UI) is refused."""
    try:
        return pipeline_id_of_partition(partition_key)
    except PartitionKeyError as exc:
        raise refused(str(exc)) from None


def own_partition(pipeline: Pipeline, partition_key: str) -> Pipeline:
    """The pipeline, when `partition_key` is its partition; a key that only starts with its id (added by hand in
    the UI) is refused."""
    if pipeline.partition != partition_key:
        raise refused(
            f"partition {partition_key!r} is not pipeline {pipeline.id}'s: its partition is {pipeline.partition!r}"
        )
    return pipeline


def partition_pipeline(app_db: AppDatabaseResource, partition_key: str) -> Pipeline:
    with app_db.sessions() as session:
        pipeline = session.get(Pipeline, partition_pipeline_id(partition_key))
    if pipeline is None:
        raise refused(f"pipeline {partition_key} does not exist")
    return own_partition(pipeline, partition_key)
