"""The schedule sensor: cron and interval triggers stored per pipeline, fired without catch-up.

Fires due together run as `pipeline_batch` runs of at most `run_batch_size` pipelines each; a fire
due alone runs as its own `pipeline_run`.
"""

from collections.abc import Sequence
from functools import partial

import dagster as dg

from pipelines_dagster.batch import batch_run_request, pipeline_batch, split_evenly
from pipelines_dagster.core.scheduler import Fire, take_due
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.sensors.common import pipeline_run_request, trigger_sensor
from pipelines_dagster.settings import Settings


def batched(fires: Sequence[Fire], *, run_batch_size: int) -> list[dg.RunRequest]:
    return [
        batch_run_request(chunk) if len(chunk) > 1 else pipeline_run_request(chunk[0])
        for chunk in split_evenly(fires, run_batch_size)
    ]


def build_schedule_sensor(settings: Settings) -> dg.SensorDefinition:
    return trigger_sensor(
        name="pipeline_schedules",
        description="Fires the schedule triggers of every pipeline: cron in its timezone, or every N minutes.",
        interval_seconds=15,
        take=partial(take_due, budget=settings.schedule_budget),
        rows="due triggers",
        skipped_because="their pipeline is disabled, or their schedule is invalid (the trigger is disabled)",
        # The trigger has been advanced either way: a skipped fire is not caught up later.
        skip_busy=True,
        requests=partial(batched, run_batch_size=settings.run_batch_size),
        jobs=(pipeline_run, pipeline_batch),
    )
