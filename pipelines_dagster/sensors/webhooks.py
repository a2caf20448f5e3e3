"""Turns each stored webhook delivery into one run of its pipeline."""

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger, WebhookDelivery
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.common import id_cursor, pipeline_run_request, trigger_result

BATCH = 500


@dg.sensor(
    name="pipeline_webhooks",
    job=pipeline_run,
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts a run for every accepted webhook delivery (POST /webhooks/{token}).",
)
def pipeline_webhooks(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
    after = id_cursor(context)
    with app_db.sessions() as session:
        rows = session.execute(
            sa.select(WebhookDelivery.id, PipelineTrigger.pipeline_id, PipelineTrigger.workspace_id,
                      PipelineTrigger.enabled, Pipeline.enabled)
            .join(PipelineTrigger, PipelineTrigger.id == WebhookDelivery.trigger_id)
            .join(Pipeline, Pipeline.id == PipelineTrigger.pipeline_id)
            .where(WebhookDelivery.id > after)
            .order_by(WebhookDelivery.id)
            .limit(BATCH)
        ).all()
    requests = [
        pipeline_run_request(
            run_key=f"webhook:{delivery_id}",
            pipeline_id=pipeline_id,
            workspace_id=workspace_id,
            trigger="webhook",
            webhook_delivery_id=str(delivery_id),
        )
        for delivery_id, pipeline_id, workspace_id, trigger_enabled, pipeline_enabled in rows
        if trigger_enabled and pipeline_enabled
    ]
    return trigger_result(context, requests, cursor=str(rows[-1][0]) if rows else context.cursor)
