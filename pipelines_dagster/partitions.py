"""Partitions shared by every pipeline asset: one partition per pipeline, keyed by its id."""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from pipelines_dagster.runs import partition_key

# Its own constant: the instance's calls need the name as a str, which the definition's `name` may not be.
PARTITIONS_NAME = "pipelines"
pipelines_partitions = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)


def add_pipeline_partitions(instance: dg.DagsterInstance, pipeline_ids: Iterable[int]) -> None:
    keys = [partition_key(pipeline_id) for pipeline_id in pipeline_ids]
    if keys:
        instance.add_dynamic_partitions(PARTITIONS_NAME, keys)


def remove_pipeline_partition(instance: dg.DagsterInstance, pipeline_id: int) -> None:
    instance.delete_dynamic_partition(PARTITIONS_NAME, partition_key(pipeline_id))
