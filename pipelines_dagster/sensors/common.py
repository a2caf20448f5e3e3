"""The one trigger sensor: each kind of trigger is this shell over the core/ function that takes its fires.

A tick reads what it needs from the instance first (known partitions, busy pipelines), then takes
the fires, which commits their rows as claimed (a schedule drops the fire of a busy pipeline; a
webhook delivery or an event waits for it, pending), and only builds the result in memory after that
commit. A tick that dies in between leaves fires marked with no run: the take of a later tick
asks the instance which of its marks have runs, and offers the others again (core/triggers/fires.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.core.catalog.pipelines import pipeline_names_and_partitions
from pipelines_dagster.core.triggers.fires import Fire, Runs, Taken
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.partitions import PARTITIONS_NAME, pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.runs import BUSY_STATUSES, batch_pipeline_ids, partition_of, pipeline_ids_of, with_names

BUSY = [dg.DagsterRunStatus(name) for name in BUSY_STATUSES]
# Dagster's tag for the run key a sensor requested a run under (dagster._core.storage.tags.RUN_KEY_TAG).
RUN_KEY_TAG = "dagster/run_key"

Take = Callable[[sessionmaker[Session], Runs], Taken[Any]]
"""Claims a tick's rows in the app database and returns the fires they owe (core/)."""
Requests = Callable[[Sequence[Any], Mapping[int, str]], Iterable[dg.RunRequest]]
"""Turns a tick's fires into run requests, given their pipelines' partition keys."""
Seen = Callable[[dg.DagsterInstance, Sequence[Any]], set[str]]
"""The run keys, among these fires', that have a run in the instance."""


def busy_pipelines(instance: dg.DagsterInstance) -> set[int]:
    """Pipelines with a queued or running run of any job: ours, and the asset job and backfills the UI launches."""
    busy: set[int] = set()
    for run in instance.get_runs(dg.RunsFilter(statuses=BUSY)):
        busy.update(pipeline_ids_of(run.tags))
    return busy


def runs_requested(instance: dg.DagsterInstance, fires: Sequence[Fire]) -> set[str]:
    """The run keys, among these fires', that a run was created for: one query, the tag's values in a list."""
    keys = sorted({fire.run_key for fire in fires})
    if not keys:
        return set()
    runs = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: keys}))
    return {run.tags[RUN_KEY_TAG] for run in runs}


@dataclass(frozen=True)
class InstanceRuns:
    """The instance's runs as a take asks about them (core.triggers.fires.Runs)."""

    instance: dg.DagsterInstance
    busy: frozenset[int]
    find: Seen

    def seen(self, fires: Sequence[Any]) -> set[str]:
        return self.find(self.instance, fires) if fires else set()


def known_partitions(context: dg.SensorEvaluationContext) -> set[str]:
    return set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))


def fire_pipelines(sessions: sessionmaker[Session], fires: Sequence[Fire]) -> tuple[dict[int, str], dict[int, str]]:
    """The names and the partition keys of the fires' pipelines: one query."""
    with sessions() as session:
        return pipeline_names_and_partitions(session, (fire.pipeline_id for fire in fires))


def pipeline_run_request(fire: Fire, keys: Mapping[int, str]) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=fire.run_key,
        job_name=pipeline_run.name,
        partition_key=partition_of(keys, fire.pipeline_id),
        tags=dict(fire.tags),
    )


def a_run_each(fires: Sequence[Fire], keys: Mapping[int, str]) -> list[dg.RunRequest]:
    return [pipeline_run_request(fire, keys) for fire in fires]


def named(requests: Iterable[dg.RunRequest], names: Mapping[int, str]) -> list[dg.RunRequest]:
    """The requests with their pipelines' names in their tags, so the Dagster UI's run list says which pipeline
    each run is for: a name tag, or a batch run's summary with names."""
    return [request.with_replaced_attrs(tags=with_names(request.tags, names)) for request in requests]


def trigger_result(
    context: dg.SensorEvaluationContext,
    requests: Iterable[dg.RunRequest],
    *,
    known: set[str],
    keys: Mapping[int, str],
) -> dg.SensorResult:
    """The runs a trigger sensor requests, with an add request for any of their partitions the
    instance does not have yet (a pipeline created a moment ago, before the partition sync).
    `known`: the partitions read before the rows were taken, so nothing after the take can fail."""
    requests = list(requests)
    wanted = {request.partition_key for request in requests if request.partition_key}
    wanted.update(
        partition_of(keys, pipeline_id) for request in requests for pipeline_id in batch_pipeline_ids(request.tags)
    )
    missing = sorted(wanted - known)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[pipelines_partitions.build_add_request(missing)] if missing else [],
    )


def trigger_sensor(
    *,
    name: str,
    description: str,
    interval_seconds: int,
    take: Take,
    rows: str,
    skipped_because: str,
    requests: Requests = a_run_each,
    seen: Seen = runs_requested,
    jobs: Sequence[dg.JobDefinition | dg.UnresolvedAssetJobDefinition] = (pipeline_run,),
) -> dg.SensorDefinition:
    """A sensor that turns the fires `take` claims into run requests.

    `rows` names what a row is in the log ("deliveries"), `skipped_because` why a row fires
    nothing. The take is told the pipelines that have a run queued or in progress (of any job: a
    batch run holds each pipeline it covers), and decides what their fires do: a schedule's is
    dropped (schedules do not catch up), a delivery's or an event's waits. `seen` tells the take
    which of its earlier marks have runs.
    """

    @dg.sensor(
        name=name,
        jobs=list(jobs),
        minimum_interval_seconds=interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=description,
    )
    def evaluate(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
        known = known_partitions(context)
        busy = frozenset(busy_pipelines(context.instance))
        taken = take(app_db.sessions, InstanceRuns(context.instance, busy, seen))
        if taken.again:
            context.log.warning(
                f"offering again {len(taken.again)} fires marked taken by an earlier tick that has no run "
                f"(that tick died before returning them): {taken.again[:10]}"
            )
        if taken.skipped:
            context.log.info(f"skipped {taken.skipped} of {taken.rows} {rows}: {skipped_because}")
        if taken.disabled_pipelines:
            # The pipeline, not the trigger, is the switch: its triggers still fire, and start nothing.
            context.log.info(
                f"pipelines {sorted(taken.disabled_pipelines)[:20]} are disabled: their triggers fired and started "
                "no run; enable a pipeline to have its triggers run it"
            )
        if taken.busy:
            context.log.info(f"skipped {len(taken.busy)} fires of busy pipelines: {taken.busy[:10]}")
        if taken.held:
            context.log.info(
                f"{taken.held} {rows} wait for a run of their pipeline to end: a later tick starts their runs"
            )
        names, keys = fire_pipelines(app_db.sessions, taken.fires)
        return trigger_result(context, named(requests(taken.fires, keys), names), known=known, keys=keys)

    return evaluate
