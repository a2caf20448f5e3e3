"""Partitions shared by every pipeline asset: one partition per runnable pipeline, under its partition key.

A partition is what a Dagster user picks in the Materialize dialog or a backfill, so only a pipeline
a run can be started for has one (enabled, with a connector that has an executor): a template seeded
without a connector, or a disabled pipeline, has none until it is given one and enabled. Removing a
partition keeps its history (Dagster's event log and run storage keep every run and materialization
of the key), and a pipeline that becomes runnable again gets the same key back, with that history.
A pipeline's key is fixed when it is created (`app_db.models.partition_key`: its id and name, `17-northwind-docs`).
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

# Its own constant: the instance's calls need the name as a str, which the definition's `name` may not be.
PARTITIONS_NAME = "pipelines"
pipelines_partitions = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)


def add_pipeline_partitions(instance: dg.DagsterInstance, keys: Iterable[str]) -> None:
    if keys := sorted(keys):
        instance.add_dynamic_partitions(PARTITIONS_NAME, keys)


def remove_pipeline_partitions(instance: dg.DagsterInstance, keys: Iterable[str]) -> None:
    for key in keys:
        instance.delete_dynamic_partition(PARTITIONS_NAME, key)


def set_pipeline_partitions(
    instance: dg.DagsterInstance, *, runnable: Iterable[str], not_runnable: Iterable[str]
) -> None:
    """Give the runnable pipelines (these partition keys) their partitions and take them from the others."""
    add_pipeline_partitions(instance, runnable)
    remove_pipeline_partitions(instance, not_runnable)
