"""Frees the locks and credit holds a failed or canceled run left behind, so its pipeline is not stranded
until the locks' TTL and its workspace's credit is not reserved until the holds expire."""

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.core.storage.locks import connector_lock_name, pipeline_lock_name
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.locks import LocksResource
from pipelines_dagster.runs import pipeline_ids_of

# A run-status tick takes no more runs after this long, well inside the daemon's 60 s sensor deadline: a tick
# killed there keeps its cursor and redoes the same runs forever. The runs it leaves are the next tick's.
TICK_SECONDS = 20.0


def tick_spent(app_db: AppDatabaseResource, run_id: str) -> dg.SkipReason | None:
    """A skip reason that ends the tick once it has spent TICK_SECONDS, else None: go on to the next run.

    A run_status_sensor moves its cursor past the run its function handled whenever the function returns a
    value, and ends the tick there (dagster/_core/definitions/run_status_sensor_definition.py); so returning
    this after handling a run leaves the runs that ended after it to the next tick, none lost or done twice.
    """
    spent = app_db.seconds_set_up
    if spent < TICK_SECONDS:
        return None
    return dg.SkipReason(f"spent {spent:.0f} s by run {run_id}; the runs that ended after it are the next tick's")


def release_run_locks(run: dg.DagsterRun, *, locks: LocksResource, app_db: AppDatabaseResource) -> list[str]:
    """Release the pipeline and connector locks this run owns (the owner token is the run id)."""
    pipeline_ids = pipeline_ids_of(run.tags)
    if not pipeline_ids:
        return []
    with app_db.sessions() as session:
        connector_ids = session.scalars(
            sa.select(Pipeline.connector_id).where(Pipeline.id.in_(pipeline_ids), Pipeline.connector_id.is_not(None))
        ).all()
    names = [
        *map(pipeline_lock_name, pipeline_ids),
        *map(connector_lock_name, sorted({c for c in connector_ids if c is not None})),
    ]
    return [name for name in names if locks.release(name, run.run_id)]


def _lock_release_sensor(status: dg.DagsterRunStatus) -> dg.SensorDefinition:
    @dg.run_status_sensor(
        name=f"release_locks_of_{status.value.lower()}_runs",
        run_status=status,
        # No monitored_jobs: every job of this code location, so also the asset job that the
        # asset pages, the asset graph and backfills launch; runs for no pipeline release nothing.
        minimum_interval_seconds=10,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Frees the locks and credit holds of pipeline runs (of any job) that ended "
        f"{status.value.lower()}.",
    )
    def release_locks(
        context: dg.RunStatusSensorContext, locks: LocksResource, app_db: AppDatabaseResource, billing: BillingResource
    ) -> dg.SkipReason | None:
        run_id = context.dagster_run.run_id
        released = release_run_locks(context.dagster_run, locks=locks, app_db=app_db)
        if released:
            context.log.info(f"released {released} left by run {run_id}")
        if holds := billing.release_holds(run_id):
            context.log.info(f"released {holds} credit hold(s) of run {run_id}")
        return tick_spent(app_db, run_id)

    return release_locks


lock_release_sensors = [
    _lock_release_sensor(dg.DagsterRunStatus.FAILURE),
    _lock_release_sensor(dg.DagsterRunStatus.CANCELED),
]
