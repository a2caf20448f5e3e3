"""Partitions shared by every pipeline asset: one partition per pipeline, keyed by its id."""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from pipelines_dagster.runs import partition_key

pipelines_partitions = dg.DynamicPartitionsDefinition(name="pipelines")


def add_pipeline_partitions(instance: dg.DagsterInstance, pipeline_ids: Iterable[int]) -> None:
    keys = [partition_key(pipeline_id) for pipeline_id in pipeline_ids]
    if keys:
        instance.add_dynamic_partitions(pipelines_partitions.name, keys)


def remove_pipeline_partition(instance: dg.DagsterInstance, pipeline_id: int) -> None:
    instance.delete_dynamic_partition(pipelines_partitions.name, partition_key(pipeline_id))
