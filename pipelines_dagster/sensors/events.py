"""Turns domain events into runs of the pipelines subscribed to their type."""

from functools import partial

import dagster as dg

from pipelines_dagster.core.triggers.queue import take_events
from pipelines_dagster.sensors.common import trigger_sensor
from pipelines_dagster.settings import Settings


def build_event_sensor(settings: Settings) -> dg.SensorDefinition:
    return trigger_sensor(
        name="pipeline_events",
        description="Starts runs of the pipelines whose event triggers match new domain events.",
        interval_seconds=5,
        take=partial(take_events, budget=settings.trigger_budget),
        rows="events",
        skipped_because="no enabled subscribed pipeline they concern",
    )
