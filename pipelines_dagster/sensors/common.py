"""What every trigger sensor needs: which pipelines are busy, and run requests for the fires core/ returns."""

from collections.abc import Iterable, Mapping
from typing import Protocol

import dagster as dg

from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.partitions import PARTITIONS_NAME, partition_key, pipelines_partitions
from pipelines_dagster.runs import BUSY_STATUSES, batch_pipeline_ids, pipeline_ids_of

BUSY = [dg.DagsterRunStatus(name) for name in BUSY_STATUSES]


class Fire(Protocol):
    """One run a trigger owes a pipeline, as core/ computes it: its run key and tags."""

    @property
    def pipeline_id(self) -> int: ...

    @property
    def run_key(self) -> str: ...

    @property
    def tags(self) -> Mapping[str, str]: ...


def busy_pipelines(instance: dg.DagsterInstance) -> set[int]:
    """Pipelines with a queued or running run of any job: ours, and the asset job and backfills the UI launches."""
    busy: set[int] = set()
    for run in instance.get_runs(dg.RunsFilter(statuses=BUSY)):
        busy.update(pipeline_ids_of(run.tags))
    return busy


def known_partitions(context: dg.SensorEvaluationContext) -> set[str]:
    return set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))


def pipeline_run_request(fire: Fire) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=fire.run_key,
        job_name=pipeline_run.name,
        partition_key=partition_key(fire.pipeline_id),
        tags=dict(fire.tags),
    )


def trigger_result(
    context: dg.SensorEvaluationContext, requests: Iterable[dg.RunRequest], *, known: set[str] | None = None
) -> dg.SensorResult:
    """The runs a trigger sensor requests, with an add request for any of their partitions the
    instance does not have yet (a pipeline created a moment ago, before the partition sync).
    `known`: the partitions read before the rows were taken, so nothing after the take can fail."""
    requests = list(requests)
    existing = known_partitions(context) if known is None else known
    wanted = {request.partition_key for request in requests if request.partition_key}
    wanted.update(
        partition_key(pipeline_id) for request in requests for pipeline_id in batch_pipeline_ids(request.tags)
    )
    missing = sorted(wanted - existing)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[pipelines_partitions.build_add_request(missing)] if missing else [],
    )
