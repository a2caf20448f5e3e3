"""A pipeline's partition as every asset reads it: its pipeline, its newest stored crawl, and the refusal of a guard."""

import dagster as dg

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.resources.app_db import AppDatabaseResource

CRAWL_RESULTS = dg.AssetKey("crawl_results")


def refused(reason: str) -> dg.Failure:
    return dg.Failure(description=reason, allow_retries=False)


def latest_crawl_blob(instance: dg.DagsterInstance, partition_key: str) -> tuple[str, str] | None:
    """(blob key, run id) of the partition's newest crawl, read from the event log."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=CRAWL_RESULTS, asset_partitions=[partition_key]), limit=1
    ).records
    if not records:
        return None
    materialization = records[0].asset_materialization
    blob_key = materialization.metadata.get("blob_key") if materialization else None
    return (blob_key.value, records[0].run_id) if blob_key else None


def stored_crawl(instance: dg.DagsterInstance, partition_key: str) -> tuple[str, str]:
    """(blob key, run id) of the partition's newest crawl, for assets built from stored crawls."""
    latest = latest_crawl_blob(instance, partition_key)
    if latest is None:
        raise refused(f"pipeline {partition_key} has no stored crawl yet; materialize crawl_results first")
    return latest


def partition_pipeline(app_db: AppDatabaseResource, partition_key: str) -> Pipeline:
    with app_db.sessions() as session:
        pipeline = session.get(Pipeline, int(partition_key))
    if pipeline is None:
        raise refused(f"pipeline {partition_key} does not exist")
    return pipeline
