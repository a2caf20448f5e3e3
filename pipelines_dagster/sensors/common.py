"""What every trigger sensor needs: which pipelines are busy, and partitions for the runs it requests."""

import dagster as dg

from pipelines_dagster.batch import pipeline_batch
from pipelines_dagster.jobs import batch_pipeline_ids, pipeline_run
from pipelines_dagster.partitions import partition_key, pipelines_partitions
from pipelines_dagster.runs import run_tags

# Queued or running: a pipeline in one of these gets no second run from a trigger.
BUSY_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def run_pipeline_id(run: dg.DagsterRun) -> int | None:
    """The pipeline a run is for: its pipeline_id tag, or the partition of a UI launch or backfill."""
    value = run.tags.get("pipeline_id") or run.tags.get("dagster/partition")
    return int(value) if value and value.isdigit() else None


def run_pipeline_ids(run: dg.DagsterRun) -> list[int]:
    """Every pipeline a run is for: the one of a pipeline_run, the members of a batch run."""
    if run.job_name == pipeline_batch.name:
        return batch_pipeline_ids(run.tags)
    pipeline_id = run_pipeline_id(run)
    return [] if pipeline_id is None else [pipeline_id]


def busy_pipelines(instance: dg.DagsterInstance) -> set[int]:
    """Pipelines with a queued or running run of any job: ours, and the asset job and backfills the UI launches."""
    busy: set[int] = set()
    for run in instance.get_runs(dg.RunsFilter(statuses=BUSY_STATUSES)):
        busy.update(run_pipeline_ids(run))
    return busy


def known_partitions(context: dg.SensorEvaluationContext) -> set[str]:
    return set(context.instance.get_dynamic_partitions(pipelines_partitions.name))


def trigger_result(
    context: dg.SensorEvaluationContext, requests: list[dg.RunRequest], *, known: set[str] | None = None
) -> dg.SensorResult:
    """The runs a trigger sensor requests, with an add request for any of their partitions the
    instance does not have yet (a pipeline created a moment ago, before the partition sync).
    `known`: the partitions read before the rows were taken, so nothing after the take can fail."""
    existing = known_partitions(context) if known is None else known
    wanted = {request.partition_key for request in requests if request.partition_key}
    wanted.update(partition_key(pipeline_id) for request in requests for pipeline_id in batch_pipeline_ids(request.tags))
    missing = sorted(wanted - existing)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[pipelines_partitions.build_add_request(missing)] if missing else [],
    )


def pipeline_run_request(
    *, run_key: str, pipeline_id: int, workspace_id: int, trigger: str, **extra_tags: str
) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=run_key,
        job_name=pipeline_run.name,
        partition_key=partition_key(pipeline_id),
        tags={**run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=trigger), **extra_tags},
    )
