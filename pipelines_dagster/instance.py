"""The Dagster instance that processes outside Dagster (CLI, API) register partitions and launch runs on."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines_dagster.settings import CHECKOUT_DIR, Settings

if TYPE_CHECKING:
    import dagster as dg

INSTANCE_CONFIG = "dagster.yaml"


def dagster_instance(settings: Settings, *, embedded_config: bool = False) -> dg.DagsterInstance:
    """$DAGSTER_HOME's instance, or the embedded default's home in the data dir.

    The data dir's own home (and any home, with `embedded_config`: the demo's) is given the embedded default's
    config, deploy/dagster.yaml, before it is opened when it has none: opened without one, Dagster warns and runs
    on its bare defaults (no run queue, no run monitoring, telemetry on)."""
    home = Path(os.environ.get("DAGSTER_HOME") or settings.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    if embedded_config or home.resolve() == settings.dagster_home:
        _install_embedded_config(home)
    # deploy/dagster.yaml reads its storage directory from the variable.
    os.environ["DAGSTER_HOME"] = str(home)
    # Imported on use: the CLI's commands that need no instance start without loading Dagster.
    import dagster as dg

    return dg.DagsterInstance.get()


def _install_embedded_config(home: Path) -> None:
    """deploy/dagster.yaml as the home's config, unless it has one (an operator's, kept as it is) or the package
    runs without its checkout."""
    config = home / INSTANCE_CONFIG
    if CHECKOUT_DIR is not None and not config.exists():
        shutil.copy(CHECKOUT_DIR / "deploy" / INSTANCE_CONFIG, config)
