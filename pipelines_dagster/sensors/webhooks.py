"""Turns each stored webhook delivery into one run of its pipeline."""

import dagster as dg

from pipelines_dagster.core.trigger_queue import take_deliveries
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.common import known_partitions, pipeline_run_request, trigger_result


@dg.sensor(
    name="pipeline_webhooks",
    job=pipeline_run,
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts a run for every accepted webhook delivery (POST /webhooks/{token}).",
)
def pipeline_webhooks(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
    # The take commits its marks before Dagster stores the run requests, so the instance is read
    # first and only building the result, in memory, follows the commit (the one window left, a
    # tick that dies in between, is in core/trigger_queue.py).
    known = known_partitions(context)
    taken = take_deliveries(app_db.sessions)
    if taken.skipped:
        context.log.info(f"skipped {taken.skipped} of {taken.rows} deliveries: their trigger or pipeline is disabled")
    return trigger_result(context, map(pipeline_run_request, taken.fires), known=known)
