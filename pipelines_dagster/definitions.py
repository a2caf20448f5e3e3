"""The code location Dagster loads: the one Definitions object of this project."""

from __future__ import annotations

import atexit
import gc

import dagster as dg

from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.checks import asset_checks
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.batch import pipeline_batch
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources import build_resources
from pipelines_dagster.schedules import build_maintenance_schedule, maintenance
from pipelines_dagster.sensors.events import pipeline_events
from pipelines_dagster.sensors.partitions import pipeline_partitions_sync
from pipelines_dagster.sensors.run_status import lock_release_sensors
from pipelines_dagster.sensors.schedules import build_schedule_sensor
from pipelines_dagster.sensors.webhooks import pipeline_webhooks
from pipelines_dagster.settings import load_settings

# Every run is a process that exits when its run ends; its interpreter's last garbage collection
# would walk the millions of objects Dagster and this code location made (0.5-0.8 s of CPU per
# run, measured). Nothing is left to flush by then, so the objects are frozen out of that walk.
atexit.register(gc.freeze)

# Settings are read at load time so a bad PIPELINES_* value fails the code location
# with the SettingsError that names it, not the first run that touches a resource.
settings = load_settings()
defs = dg.Definitions(
    assets=[crawl_results, kb_documents, page_changes],
    asset_checks=asset_checks,
    jobs=[pipeline_run, pipeline_batch, maintenance],
    schedules=[build_maintenance_schedule(retention_days=settings.retention_days)],
    sensors=[
        build_schedule_sensor(batch_size=settings.schedule_batch_size, run_batch_size=settings.run_batch_size),
        pipeline_webhooks,
        pipeline_events,
        pipeline_partitions_sync,
        *lock_release_sensors,
    ],
    resources=build_resources(settings),
    executor=dg.in_process_executor,
)
