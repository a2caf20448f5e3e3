"""Keeps the `pipelines` partitions equal to the runnable pipelines: the safety net behind services.py, and what
brings a deployment from before that rule in line (its templates' and disabled pipelines' partitions go; their
runs and materializations stay in the instance, and run history reads them by their tags)."""

import dagster as dg

from pipelines_dagster.core.catalog.pipelines import runnable_partitions
from pipelines_dagster.partitions import PARTITIONS_NAME, pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource


@dg.sensor(
    name="pipeline_partitions_sync",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keeps one partition per runnable pipeline (enabled, with a web connector): adds those of "
    "pipelines that became runnable, removes those of pipelines disabled, left without a connector or deleted. "
    "A removed partition's runs stay in run history.",
)
def pipeline_partitions_sync(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
    # Partitions first, then rows: a partition is only ever added once its pipeline has committed, so
    # one read here whose row the later read lacks has lost its pipeline (deleted, or a creation killed
    # before its commit when partitions came first) and is removed now.
    existing = set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    with app_db.sessions() as session:
        wanted = set(runnable_partitions(session).values())
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if added := sorted(wanted - existing):
        requests.append(pipelines_partitions.build_add_request(added))
    if removed := sorted(existing - wanted):
        context.log.info(f"removing {len(removed)} partitions of pipelines that cannot run: {removed[:20]}")
        requests.append(pipelines_partitions.build_delete_request(removed))
    return dg.SensorResult(dynamic_partitions_requests=requests)
