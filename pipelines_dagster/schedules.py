"""Code-defined maintenance schedules: daily retention of crawl blobs, webhook and notification deliveries."""

from datetime import UTC, datetime

import dagster as dg
import pydantic

from pipelines_dagster.core.retention import apply_retention
from pipelines_dagster.crawl_metadata import latest_crawl
from pipelines_dagster.partitions import PARTITIONS_NAME
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.blob_store import BlobStoreResource


class RetentionConfig(dg.Config):
    retention_days: int = pydantic.Field(default=30, ge=1, description="Delete what is older than this many days.")


@dg.op(
    description="Delete crawl blobs, webhook deliveries and finished notification deliveries older than the "
    "retention; keep each pipeline's latest crawl."
)
def apply_retention_op(
    context: dg.OpExecutionContext,
    config: RetentionConfig,
    app_db: AppDatabaseResource,
    blob_store: BlobStoreResource,
) -> dg.Output[None]:
    # The crawl the event log names as latest is what kb_documents rebuilds from, whatever its age.
    latest = (latest_crawl(context.instance, key) for key in context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    report = apply_retention(
        blob_store.store(),
        app_db.sessions,
        now=datetime.now(UTC),
        days=config.retention_days,
        keep={found.blob_key for found in latest if found is not None and found.blob_key},
    )
    context.log.info(
        f"deleted {len(report.blobs_deleted)} crawl blobs (kept {report.blobs_kept}) "
        f", {report.deliveries_deleted} webhook deliveries and {report.notifications_deleted} notification "
        f"deliveries older than {config.retention_days} days"
    )
    return dg.Output(
        None,
        metadata={
            "blobs_deleted": len(report.blobs_deleted),
            "blobs_kept": report.blobs_kept,
            "deliveries_deleted": report.deliveries_deleted,
            "notifications_deleted": report.notifications_deleted,
        },
    )


@dg.job(description="Retention: old crawl blobs, webhook and notification deliveries are deleted.")
def maintenance() -> None:
    apply_retention_op()


def build_maintenance_schedule(*, retention_days: int) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name="maintenance_daily",
        job=maintenance,
        cron_schedule="17 3 * * *",
        execution_timezone="UTC",
        run_config=dg.RunConfig(ops={"apply_retention_op": RetentionConfig(retention_days=retention_days)}),
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Daily at 03:17 UTC: delete crawl blobs and webhook deliveries older than {retention_days} days.",
    )
