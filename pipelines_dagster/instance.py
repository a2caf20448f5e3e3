"""The Dagster instance that processes outside Dagster (CLI, API) register partitions and launch runs on."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from pipelines_dagster.settings import Settings


def dagster_instance(settings: Settings) -> dg.DagsterInstance:
    """$DAGSTER_HOME's instance, or the embedded default's home in the data dir."""
    home = os.environ.get("DAGSTER_HOME") or str(settings.dagster_home)
    Path(home).mkdir(parents=True, exist_ok=True)
    # deploy/dagster.yaml reads its storage directory from the variable.
    os.environ["DAGSTER_HOME"] = home
    return dg.DagsterInstance.get()
