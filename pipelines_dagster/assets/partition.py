"""A pipeline's partition as every asset reads it: its pipeline, its newest stored crawl, and the refusal of a guard."""

import dagster as dg

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.crawl_metadata import StoredCrawl, latest_crawl
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.runs import PartitionKeyError, pipeline_id_of_partition


def refused(reason: str) -> dg.Failure:
    return dg.Failure(description=reason, allow_retries=False)


def stored_crawl(instance: dg.DagsterInstance, partition_key: str) -> tuple[str, str]:
    """(blob key, run id) of the partition's newest crawl, for assets built from stored crawls."""
    blob_key, latest = stored_crawl_with_metadata(instance, partition_key)
    return blob_key, latest.run_id


def stored_crawl_with_metadata(instance: dg.DagsterInstance, partition_key: str) -> tuple[str, StoredCrawl]:
    """(blob key, the crawl) of the partition's newest crawl, for an asset that also reads its counts."""
    latest = latest_crawl(instance, partition_key)
    if latest is None or latest.blob_key is None:
        raise refused(f"pipeline {partition_key} has no stored crawl yet; materialize crawl_results first")
    return latest.blob_key, latest


def partition_pipeline_id(partition_key: str) -> int:
    """The partition's pipeline; a partition that is none (added by hand in the UI) is refused."""
    try:
        return pipeline_id_of_partition(partition_key)
    except PartitionKeyError as exc:
        raise refused(str(exc)) from None


def partition_pipeline(app_db: AppDatabaseResource, partition_key: str) -> Pipeline:
    with app_db.sessions() as session:
        pipeline = session.get(Pipeline, partition_pipeline_id(partition_key))
    if pipeline is None:
        raise refused(f"pipeline {partition_key} does not exist")
    return pipeline
