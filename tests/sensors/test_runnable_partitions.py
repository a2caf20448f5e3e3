"""An instance from before partitions were only runnable pipelines: one partition-sync tick drops the keys of
templates and disabled pipelines and keeps the runnable ones, and the history of a dropped partition stays
readable (run history, its latest crawl), on a real Dagster instance with a real crawl."""

from __future__ import annotations

import dagster as dg

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.crawl_metadata import latest_crawl
from pipelines_dagster.history import RunHistory
from pipelines_dagster.partitions import PARTITIONS_NAME, add_pipeline_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.partitions import pipeline_partitions_sync
from tests.assets.conftest import Stack, embedded, web  # noqa: F401  (fixtures)
from tests.sensors.test_trigger_sensors import evaluate


def test_one_sync_tick_drops_the_partitions_that_cannot_run_and_keeps_their_history(embedded: Stack):
    stack = embedded
    workspace_id, runnable = stack.pipeline(stack.site(2))
    other_workspace, disabled = stack.pipeline(stack.site(1, prefix="/d"))
    assert stack.run(disabled, other_workspace).success
    with transaction(stack.sessions) as session:
        seeded = services.seed_workspace(session, stack.instance, workspace_id).created
        services.set_pipeline_enabled(
            session, stack.instance, workspace_id=other_workspace, pipeline_id=disabled, enabled=False
        )
    # The old rule: every pipeline a partition, templates and disabled ones included.
    add_pipeline_partitions(stack.instance, [*map(stack.key, seeded), stack.key(disabled)])
    assert len(stack.instance.get_dynamic_partitions(PARTITIONS_NAME)) == len(seeded) + 2

    result = evaluate(pipeline_partitions_sync, stack.instance, AppDatabaseResource(url=stack.url))
    for request in result.dynamic_partitions_requests:
        if isinstance(request, dg.DeleteDynamicPartitionsRequest):
            for key in request.partition_keys:
                stack.instance.delete_dynamic_partition(PARTITIONS_NAME, key)
    assert stack.instance.get_dynamic_partitions(PARTITIONS_NAME) == [stack.key(runnable)]

    # The dropped partition's run is still in run history and its crawl is still the one the next run builds on.
    [run] = RunHistory(stack.instance, stack.sessions).list_runs(other_workspace, pipeline_id=disabled).runs
    assert (run.status, run.crawls_attempted) == ("succeeded", 1)
    stored = latest_crawl(stack.instance, stack.key(disabled))
    assert stored is not None and stored.run_id == run.run_id
