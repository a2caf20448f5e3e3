"""Keeps the `pipelines` partitions equal to the pipelines table: the safety net behind services.py."""

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.partitions import PARTITIONS_NAME, pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.runs import partition_key


@dg.sensor(
    name="pipeline_partitions_sync",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds partitions for new pipelines and removes those of deleted ones.",
)
def pipeline_partitions_sync(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
    # Partitions first, then rows: a partition is only ever added once its pipeline has committed, so
    # one read here whose row the later read lacks has lost its pipeline (deleted, or a creation killed
    # before its commit when partitions came first) and is removed now.
    existing = set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    with app_db.sessions() as session:
        wanted = {partition_key(pipeline_id) for pipeline_id in session.scalars(sa.select(Pipeline.id))}
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if added := sorted(wanted - existing):
        requests.append(pipelines_partitions.build_add_request(added))
    if removed := sorted(existing - wanted):
        requests.append(pipelines_partitions.build_delete_request(removed))
    return dg.SensorResult(dynamic_partitions_requests=requests)
