"""One trigger sensor tick, in a process of its own, that stops after its takes commit and before it
returns its run requests: the test kills it there, as a daemon or code server dies mid-tick.

python -m tests.sensors.killed_tick {webhook|event|schedule} APP_DB_URL, with the Dagster instance's
serialized ref in KILLED_TICK_INSTANCE_REF; prints "committed" when the marks are in the database.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import dagster as dg
from dagster._core.instance.ref import InstanceRef
from dagster._serdes import deserialize_value

from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors import common
from pipelines_dagster.sensors.events import build_event_sensor
from pipelines_dagster.sensors.schedules import build_schedule_sensor
from pipelines_dagster.sensors.webhooks import build_webhook_sensor
from pipelines_dagster.settings import Settings
from tests.sensors.test_trigger_sensors import evaluate

SENSORS = {"webhook": build_webhook_sensor, "event": build_event_sensor, "schedule": build_schedule_sensor}


def hang_after_commit(*args: Any, **kwargs: Any) -> dg.SensorResult:
    """In place of building the tick's result, which the tick does after its last commit."""
    print("committed", flush=True)
    time.sleep(600)
    raise SystemExit("not killed")


def main(kind: str, url: str) -> None:
    instance = dg.DagsterInstance.from_ref(deserialize_value(os.environ["KILLED_TICK_INSTANCE_REF"], InstanceRef))
    sensor = SENSORS[kind](Settings(run_batch_size=20))
    common.trigger_result = hang_after_commit
    evaluate(sensor, instance, AppDatabaseResource(url=url))


if __name__ == "__main__":
    main(*sys.argv[1:3])
