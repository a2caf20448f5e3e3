"""The Dagster instance that processes outside Dagster (CLI, API) register partitions and launch runs on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines_dagster.settings import Settings

if TYPE_CHECKING:
    import dagster as dg


def dagster_instance(settings: Settings) -> dg.DagsterInstance:
    """$DAGSTER_HOME's instance, or the embedded default's home in the data dir."""
    home = os.environ.get("DAGSTER_HOME") or str(settings.dagster_home)
    Path(home).mkdir(parents=True, exist_ok=True)
    # deploy/dagster.yaml reads its storage directory from the variable.
    os.environ["DAGSTER_HOME"] = home
    # Imported on use: the CLI's commands that need no instance start without loading Dagster.
    import dagster as dg

    return dg.DagsterInstance.get()
