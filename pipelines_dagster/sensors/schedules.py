"""The schedule sensor: cron and interval triggers stored per pipeline, fired without catch-up.

Fires due together run as `pipeline_batch` runs of at most `run_batch_size` pipelines each; a fire
due alone runs as its own `pipeline_run`.
"""

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, cast

import dagster as dg

from pipelines_dagster.batch import batch_run_request, pipeline_batch, split_evenly
from pipelines_dagster.core.triggers.scheduler import ScheduledFire, take_due
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.runs import MEMBER, PIPELINE_BATCH_JOB, PIPELINE_BATCH_OP, member_pipeline_tag
from pipelines_dagster.sensors.common import pipeline_run_request, runs_requested, trigger_sensor
from pipelines_dagster.settings import Settings


def batched(fires: Sequence[ScheduledFire], keys: Mapping[int, str], *, run_batch_size: int) -> list[dg.RunRequest]:
    return [
        batch_run_request(chunk, keys) if len(chunk) > 1 else pipeline_run_request(chunk[0], keys)
        for chunk in split_evenly(fires, run_batch_size)
    ]


def batch_fires(run: dg.DagsterRun) -> set[tuple[int, str]]:
    """The (pipeline, scheduled_for) of each fire a `pipeline_batch` run's config lists."""
    ops = cast("Mapping[str, Any]", run.run_config.get("ops") or {})
    members = ops.get(PIPELINE_BATCH_OP, {}).get("config", {}).get("pipelines", [])
    return {(member["pipeline_id"], member["scheduled_for"]) for member in members if member.get("scheduled_for")}


def scheduled_runs(instance: dg.DagsterInstance, fires: Sequence[ScheduledFire]) -> set[str]:
    """The run keys, among these fires', that have a run: a `pipeline_run` under the fire's key, or a
    `pipeline_batch` run (keyed by all its fires) that lists the fire; one batch run found answers
    for all its members."""
    found = runs_requested(instance, fires)
    batched: set[tuple[int, str]] = set()
    for fire in fires:
        member = (fire.pipeline_id, fire.scheduled_for.isoformat())
        if fire.run_key in found:
            continue
        if member not in batched:
            for run in instance.get_runs(
                dg.RunsFilter(
                    job_name=PIPELINE_BATCH_JOB,
                    tags={member_pipeline_tag(fire.pipeline_id): MEMBER},
                    created_after=fire.scheduled_for,
                )
            ):
                batched |= batch_fires(run)
        if member in batched:
            found.add(fire.run_key)
    return found


def build_schedule_sensor(settings: Settings) -> dg.SensorDefinition:
    return trigger_sensor(
        name="pipeline_schedules",
        description=(
            "Runs every pipeline's own schedule (cron in its timezone, or every N minutes): pipelines' schedules "
            "are rows in the app database, not Dagster schedules, so they are not listed under Schedules; this "
            "one sensor fires them all. See a pipeline's schedule with `pipelines-dagster trigger list "
            "--workspace W --pipeline P`; its runs carry the tag trigger=scheduled."
        ),
        interval_seconds=15,
        take=partial(take_due, budget=settings.schedule_budget),
        rows="due triggers",
        skipped_because="their pipeline is disabled, or their schedule is invalid (the trigger is disabled)",
        requests=partial(batched, run_batch_size=settings.run_batch_size),
        seen=scheduled_runs,
        jobs=(pipeline_run, pipeline_batch),
    )
