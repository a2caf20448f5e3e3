"""Partitions shared by every pipeline asset: one partition per runnable pipeline, keyed by its id.

A partition is what a Dagster user picks in the Materialize dialog or a backfill, so only a pipeline
a run can be started for has one (enabled, with a connector that has an executor): a template seeded
without a connector, or a disabled pipeline, has none until it is given one and enabled. Removing a
partition keeps its history (Dagster's event log and run storage keep every run and materialization
of the key), and a pipeline that becomes runnable again gets the same key back, with that history.
"""

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


def remove_pipeline_partitions(instance: dg.DagsterInstance, pipeline_ids: Iterable[int]) -> None:
    for pipeline_id in pipeline_ids:
        instance.delete_dynamic_partition(PARTITIONS_NAME, partition_key(pipeline_id))


def set_pipeline_partitions(
    instance: dg.DagsterInstance, *, runnable: Iterable[int], not_runnable: Iterable[int]
) -> None:
    """Give the runnable pipelines their partitions and take them from the others."""
    add_pipeline_partitions(instance, runnable)
    remove_pipeline_partitions(instance, not_runnable)
