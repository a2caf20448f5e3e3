"""Turns domain events into runs of the pipelines subscribed to their type."""

import dagster as dg

from pipelines_dagster.core.trigger_queue import take_events
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.common import known_partitions, pipeline_run_request, trigger_result


@dg.sensor(
    name="pipeline_events",
    job=pipeline_run,
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts runs of the pipelines whose event triggers match new domain events.",
)
def pipeline_events(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
    # The take commits its marks before Dagster stores the run requests, so the instance is read
    # first and only building the result, in memory, follows the commit (the one window left, a
    # tick that dies in between, is in core/trigger_queue.py).
    known = known_partitions(context)
    taken = take_events(app_db.sessions)
    if taken.skipped:
        context.log.info(f"skipped {taken.skipped} of {taken.rows} events: no enabled subscribed pipeline they concern")
    return trigger_result(context, map(pipeline_run_request, taken.fires), known=known)
