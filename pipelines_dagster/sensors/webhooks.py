"""Turns each stored webhook delivery into one run of its pipeline."""

from functools import partial

import dagster as dg

from pipelines_dagster.core.triggers.queue import take_deliveries
from pipelines_dagster.sensors.common import trigger_sensor
from pipelines_dagster.settings import Settings


def build_webhook_sensor(settings: Settings) -> dg.SensorDefinition:
    return trigger_sensor(
        name="pipeline_webhooks",
        description="Starts a run for every accepted webhook delivery (POST /webhooks/{token}).",
        interval_seconds=5,
        take=partial(take_deliveries, budget=settings.trigger_budget),
        rows="deliveries",
        skipped_because="their trigger or pipeline is disabled",
    )
