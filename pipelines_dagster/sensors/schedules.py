"""The schedule sensor: cron and interval triggers stored per pipeline, fired without catch-up.

Fires due together run as `pipeline_batch` runs of at most `run_batch_size` pipelines each; a fire
due alone runs as its own `pipeline_run`.
"""

from collections.abc import Sequence

import dagster as dg

from pipelines_dagster.batch import batch_run_request, pipeline_batch, split_evenly
from pipelines_dagster.core.scheduler import Fire, due_fires
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.common import busy_pipelines, pipeline_run_request, trigger_result

# Well inside Dagster's default 60 s sensor evaluation timeout.
TIME_BUDGET_SECONDS = 30.0


def _run_request(fires: Sequence[Fire]) -> dg.RunRequest:
    if len(fires) > 1:
        return batch_run_request(fires)
    [fire] = fires
    return pipeline_run_request(fire)


def build_schedule_sensor(*, batch_size: int, run_batch_size: int) -> dg.SensorDefinition:
    @dg.sensor(
        name="pipeline_schedules",
        jobs=[pipeline_run, pipeline_batch],
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Fires the schedule triggers of every pipeline: cron in its timezone, or every N minutes.",
    )
    def pipeline_schedules(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
        busy = busy_pipelines(context.instance)
        fires, skipped = [], []
        for fire in due_fires(app_db.sessions, batch_size=batch_size, time_budget_seconds=TIME_BUDGET_SECONDS):
            # The trigger has been advanced either way: a skipped fire is not caught up later.
            if not fire.pipeline_enabled or fire.pipeline_id in busy:
                skipped.append(fire.run_key)
                continue
            busy.add(fire.pipeline_id)
            fires.append(fire)
        if skipped:
            context.log.info(f"skipped {len(skipped)} fires of disabled or busy pipelines: {skipped[:10]}")
        return trigger_result(context, [_run_request(chunk) for chunk in split_evenly(fires, run_batch_size)])

    return pipeline_schedules
