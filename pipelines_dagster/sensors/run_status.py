"""Frees the locks a failed or canceled run left behind, so its pipeline is not stranded until the TTL."""

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.core.locks import connector_lock_name, pipeline_lock_name
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.locks import LocksResource
from pipelines_dagster.sensors.common import run_pipeline_id


def release_run_locks(run: dg.DagsterRun, *, locks: LocksResource, app_db: AppDatabaseResource) -> list[str]:
    """Release the pipeline and connector locks this run owns (the owner token is the run id)."""
    pipeline_id = run_pipeline_id(run)
    if pipeline_id is None:
        return []
    names = [pipeline_lock_name(pipeline_id)]
    with app_db.sessions() as session:
        connector_id = session.scalar(sa.select(Pipeline.connector_id).where(Pipeline.id == pipeline_id))
    if connector_id is not None:
        names.append(connector_lock_name(connector_id))
    return [name for name in names if locks.release(name, run.run_id)]


def _lock_release_sensor(status: dg.DagsterRunStatus) -> dg.SensorDefinition:
    @dg.run_status_sensor(
        name=f"release_locks_of_{status.value.lower()}_runs",
        run_status=status,
        monitored_jobs=[pipeline_run],
        minimum_interval_seconds=10,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Frees the locks of pipeline runs that ended {status.value.lower()}.",
    )
    def release_locks(context: dg.RunStatusSensorContext, locks: LocksResource, app_db: AppDatabaseResource) -> None:
        released = release_run_locks(context.dagster_run, locks=locks, app_db=app_db)
        if released:
            context.log.info(f"released {released} left by run {context.dagster_run.run_id}")

    return release_locks


lock_release_sensors = [_lock_release_sensor(dg.DagsterRunStatus.FAILURE), _lock_release_sensor(dg.DagsterRunStatus.CANCELED)]
