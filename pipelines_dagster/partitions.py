"""Partitions shared by every pipeline asset: one partition per pipeline, keyed by its id."""

from __future__ import annotations

import dagster as dg

pipelines_partitions = dg.DynamicPartitionsDefinition(name="pipelines")
