"""The code location Dagster loads: the one Definitions object of this project."""

from __future__ import annotations

import atexit
import gc
import os
import warnings

import dagster as dg

from pipelines_dagster.assets.checks import asset_checks
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.batch import pipeline_batch
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources.deployment import build_resources
from pipelines_dagster.schedules import build_maintenance_schedule, maintenance
from pipelines_dagster.sensors.events import build_event_sensor
from pipelines_dagster.sensors.notifications import notification_sender, run_end_sensors
from pipelines_dagster.sensors.partitions import pipeline_partitions_sync
from pipelines_dagster.sensors.run_status import lock_release_sensors
from pipelines_dagster.sensors.schedules import build_schedule_sensor
from pipelines_dagster.sensors.webhooks import build_webhook_sensor
from pipelines_dagster.settings import load_settings

# Dagster resolving the sensors of jobs passes `owners` to SensorDefinition itself, which warns that the parameter
# is beta: noise of Dagster's own making, whoever loads the code location.
warnings.filterwarnings(
    "ignore", message="Parameter `owners` of initializer `SensorDefinition.__init__`", category=dg.BetaWarning
)

# Dagster's run-status sensors (lock release, run notifications) handle 5 ended runs a tick unless told otherwise,
# read from the environment of the process that evaluates them, this one: at 5-10 s ticks that is 30-60 runs a
# minute, fewer than a busy deployment ends. Ours take up to 100: each reads an ended run once, whatever its
# pipelines, and stops a tick past TICK_SECONDS (sensors/run_status.py), inside the 60 s sensor deadline.
RUNS_PER_STATUS_TICK = "100"
for limit in ("DAGSTER_RUN_STATUS_SENSOR_PROCESS_LIMIT", "DAGSTER_RUN_STATUS_SENSOR_FETCH_LIMIT"):
    os.environ.setdefault(limit, RUNS_PER_STATUS_TICK)

# Settings are read at load time so a bad PIPELINES_* value fails the code location
# with the SettingsError that names it, not the first run that touches a resource.
settings = load_settings()
defs = dg.Definitions(
    assets=[crawl_results, kb_documents, page_changes],
    asset_checks=asset_checks,
    jobs=[pipeline_run, pipeline_batch, maintenance],
    schedules=[build_maintenance_schedule(retention_days=settings.retention_days)],
    sensors=[
        build_schedule_sensor(settings),
        build_webhook_sensor(settings),
        build_event_sensor(settings),
        pipeline_partitions_sync,
        *lock_release_sensors,
        *run_end_sensors,
        notification_sender,
    ],
    resources=build_resources(settings),
    executor=dg.in_process_executor,
)

# Every run is a process of its own that loads this module and exits when its run ends. What the
# imports made lives as long as the process, so it is frozen out of the garbage collector's full
# passes (one fell on every run's job lookup: 0.09 s); at exit, so is everything else, sparing
# the interpreter's last collection (0.3-0.6 s per run, measured). Nothing is left to flush then.
gc.freeze()
atexit.register(gc.freeze)
