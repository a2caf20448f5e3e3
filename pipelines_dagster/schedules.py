"""Code-defined maintenance schedules: daily retention of crawl blobs, webhook and notification deliveries, and of
Dagster's own runs and their event logs."""

import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import dagster as dg
import pydantic

from pipelines_dagster.core.catalog.pipelines import every_partition
from pipelines_dagster.core.storage.retention import apply_retention
from pipelines_dagster.crawl_metadata import StoredCrawl, latest_crawl
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.runs import CODE_LOCATION


class RetentionConfig(dg.Config):
    retention_days: int = pydantic.Field(default=30, ge=1, description="Delete what is older than this many days.")


FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
RUNS_PER_PAGE = 500
MOST_RUNS_DELETED = 20_000
"""A day's deletions at most, so one maintenance run stays short; the rest go the next day."""


@dataclass(frozen=True)
class RunsPruned:
    deleted: int
    kept: int
    """Old runs kept because they hold a pipeline's latest crawl."""
    more: bool
    """The day's limit was reached with old runs left."""


def latest_crawls(instance: dg.DagsterInstance, keys: list[str]) -> list[StoredCrawl]:
    """The newest crawl of each of these partitions: what kb_documents, page_changes and the checks build on."""
    return [found for key in keys if (found := latest_crawl(instance, key)) is not None]


def prune_runs(instance: dg.DagsterInstance, *, before: datetime, keep: set[str]) -> RunsPruned:
    """Delete the finished runs created before `before`, with their event logs, oldest first, except the runs
    in `keep`. The app database is not touched: the ledger keeps every charge, and run history reads the
    runs that are left."""
    deleted = kept = 0
    # Pages in run order; the next starts after the newest run kept so far (a deleted run is no cursor, and
    # every run before the cursor was either kept or deleted).
    cursor = None
    while deleted < MOST_RUNS_DELETED:
        records = instance.get_run_records(
            dg.RunsFilter(statuses=FINISHED, created_before=before), limit=RUNS_PER_PAGE, cursor=cursor, ascending=True
        )
        if not records:
            return RunsPruned(deleted, kept, more=False)
        for record in records:
            run_id = record.dagster_run.run_id
            if run_id in keep:
                kept += 1
                cursor = run_id
            else:
                instance.delete_run(run_id)
                deleted += 1
    return RunsPruned(deleted, kept, more=True)


@dg.op(
    description="Delete crawl blobs, webhook deliveries, finished notification deliveries and finished Dagster runs "
    "(with their event logs) older than the retention; keep each pipeline's latest crawl and the run that stored "
    "it, and every ledger entry. Remove the leftovers of killed blob writes. Release the credit holds of runs "
    "that ended."
)
def apply_retention_op(
    context: dg.OpExecutionContext,
    config: RetentionConfig,
    app_db: AppDatabaseResource,
    blob_store: BlobStoreResource,
    billing: BillingResource,
) -> dg.Output[None]:
    holds_released = release_ended_holds(context.instance, billing)
    now = datetime.now(UTC)
    # The crawl the event log names as latest is what kb_documents rebuilds from, whatever its age: its blob
    # and its run stay, for every pipeline (a disabled one's too, which has no partition now).
    with app_db.sessions() as session:
        keys = sorted(every_partition(session).values())
    latest = latest_crawls(context.instance, keys)
    report = apply_retention(
        blob_store.store(),
        app_db.sessions,
        now=now,
        days=config.retention_days,
        keep={found.blob_key for found in latest if found.blob_key},
    )
    runs = prune_runs(
        context.instance, before=now - timedelta(days=config.retention_days), keep={found.run_id for found in latest}
    )
    context.log.info(
        f"deleted {len(report.blobs_deleted)} crawl blobs (kept {report.blobs_kept}) "
        f", {report.deliveries_deleted} webhook deliveries and {report.notifications_deleted} notification "
        f"deliveries older than {config.retention_days} days; deleted {runs.deleted} Dagster runs (kept "
        f"{runs.kept} that hold a pipeline's latest crawl{'; more are left for tomorrow' if runs.more else ''}); "
        f"removed {report.abandoned_writes_removed} abandoned blob writes; released {holds_released} credit holds "
        "of ended runs"
    )
    return dg.Output(
        None,
        metadata={
            "blobs_deleted": len(report.blobs_deleted),
            "blobs_kept": report.blobs_kept,
            "deliveries_deleted": report.deliveries_deleted,
            "notifications_deleted": report.notifications_deleted,
            "abandoned_writes_removed": report.abandoned_writes_removed,
            "credit_holds_released": holds_released,
            "runs_deleted": runs.deleted,
            "runs_kept": runs.kept,
        },
    )


def release_ended_holds(instance: dg.DagsterInstance, billing: BillingResource) -> int:
    """Release the holds of runs that ended (the run-end sensors missed them: stopped, or a tick lost)
    or that expired; how many were released."""
    plain = billing.billing
    ended = [run_id for run_id in plain.open_hold_runs() if _ended(instance, run_id)]
    return sum(plain.release_holds(run_id) for run_id in ended) + plain.release_expired()


def _ended(instance: dg.DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    # A hold whose run Dagster no longer knows (deleted) is held by nothing.
    return run is None or run.is_finished


@dg.job(description="Retention: old crawl blobs, webhook and notification deliveries and Dagster runs are deleted.")
def maintenance() -> None:
    apply_retention_op()


RETENTION_SCHEDULE = "maintenance_daily"


def build_maintenance_schedule(*, retention_days: int) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=RETENTION_SCHEDULE,
        job=maintenance,
        cron_schedule="17 3 * * *",
        execution_timezone="UTC",
        run_config=dg.RunConfig(ops={"apply_retention_op": RetentionConfig(retention_days=retention_days)}),
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Daily at 03:17 UTC: delete crawl blobs, deliveries and Dagster runs older than {retention_days} "
        "days (each pipeline's latest crawl stays).",
    )


def keep_retention_on(instance: dg.DagsterInstance) -> bool:
    """Switch the retention schedule back on if someone stopped it; True when it was off.

    Retention is garbage collection, not a user's choice: without it crawl blobs and delivery logs
    pile up. So, like the reference's cleanup schedule, reseeding the templates forces it on.
    """
    # Dagster's own in-process loading of this code location: the schedule's state is keyed by
    # location, repository and name, whichever process reads it.
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name="pipelines_dagster.definitions"),
        # As the deployment names it, so the schedule's state read here is the one the daemon reads.
        location_name=CODE_LOCATION,
    )
    with origin.create_location(instance) as location:
        (repository,) = location.get_repositories().values()
        schedule = repository.get_schedule(RETENTION_SCHEDULE)
        stored = instance.get_instigator_state(schedule.get_remote_origin_id(), schedule.selector_id)
        if schedule.get_current_instigator_state(stored).is_running:
            return False
        instance.start_schedule(schedule)
        return True
