"""The floor of bench/run_overhead.py: a trivial partitioned asset and the sensor that fires it, as a
code location of its own, run by the same daemon, run coordinator and launcher as ours.

The bench writes {"batch": ..., "count": N, "job": ...} to the file named by FLOOR_TRIGGER_FILE; on
its next tick the sensor adds N partitions and requests one run of that job per partition, tagged
with the batch. `floor_job` runs its step in the run's process (as ours do); `floor_job_multiprocess`
keeps Dagster's default executor, a subprocess per step.
"""

import json
import os
from pathlib import Path

import dagster as dg

floor_partitions = dg.DynamicPartitionsDefinition(name="floor")


@dg.asset(partitions_def=floor_partitions)
def floor_asset(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"partition": context.partition_key})


floor_job = dg.define_asset_job("floor_job", selection=[floor_asset], executor_def=dg.in_process_executor)
floor_job_multiprocess = dg.define_asset_job(
    "floor_job_multiprocess", selection=[floor_asset], executor_def=dg.multiprocess_executor
)


@dg.sensor(
    jobs=[floor_job, floor_job_multiprocess], minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING
)
def floor_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    path = Path(os.environ["FLOOR_TRIGGER_FILE"])
    trigger = json.loads(path.read_text()) if path.exists() else None
    if trigger is None or trigger["batch"] == context.cursor:
        return dg.SensorResult(cursor=context.cursor)
    keys = [f"{trigger['batch']}-{number}" for number in range(trigger["count"])]
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=key, job_name=trigger["job"], partition_key=key, tags={"floor_batch": trigger["batch"]}
            )
            for key in keys
        ],
        dynamic_partitions_requests=[floor_partitions.build_add_request(keys)],
        cursor=trigger["batch"],
    )


defs = dg.Definitions(assets=[floor_asset], jobs=[floor_job, floor_job_multiprocess], sensors=[floor_sensor])
