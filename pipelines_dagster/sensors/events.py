"""Turns domain events into runs of the pipelines subscribed to their type."""

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.models import DomainEvent, Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.sensors.common import id_cursor, pipeline_run_request, trigger_result

BATCH = 500


def concerns(event: DomainEvent, pipeline_id: int, connector_id: int | None) -> bool:
    """An event naming a pipeline or connector fires only the pipelines it names; others fire them all."""
    named_pipeline = event.payload.get("pipeline_id")
    named_connector = event.payload.get("connector_id")
    return (named_pipeline is None or named_pipeline == pipeline_id) and (
        named_connector is None or named_connector == connector_id
    )


@dg.sensor(
    name="pipeline_events",
    job=pipeline_run,
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts runs of the pipelines whose event triggers match new domain events.",
)
def pipeline_events(context: dg.SensorEvaluationContext, app_db: AppDatabaseResource) -> dg.SensorResult:
    after = id_cursor(context)
    with app_db.sessions() as session:
        events = session.scalars(
            sa.select(DomainEvent).where(DomainEvent.id > after).order_by(DomainEvent.id).limit(BATCH)
        ).all()
        subscriptions = session.execute(
            sa.select(PipelineTrigger.id, PipelineTrigger.workspace_id, PipelineTrigger.event_type,
                      Pipeline.id, Pipeline.connector_id)
            .join(Pipeline, Pipeline.id == PipelineTrigger.pipeline_id)
            .where(
                PipelineTrigger.kind == TriggerKind.EVENT.value,
                PipelineTrigger.enabled.is_(True),
                Pipeline.enabled.is_(True),
                PipelineTrigger.workspace_id.in_({event.workspace_id for event in events}),
                PipelineTrigger.event_type.in_({event.event_type for event in events}),
            )
        ).all() if events else []
    by_topic: dict[tuple[int, str], list[tuple[int, int, int | None]]] = {}
    for trigger_id, workspace_id, event_type, pipeline_id, connector_id in subscriptions:
        by_topic.setdefault((workspace_id, event_type), []).append((trigger_id, pipeline_id, connector_id))
    requests = [
        pipeline_run_request(
            run_key=f"event:{event.id}:{trigger_id}",
            pipeline_id=pipeline_id,
            workspace_id=event.workspace_id,
            trigger="event",
            event_id=str(event.id),
            event_type=event.event_type,
        )
        for event in events
        for trigger_id, pipeline_id, connector_id in by_topic.get((event.workspace_id, event.event_type), [])
        if concerns(event, pipeline_id, connector_id)
    ]
    return trigger_result(context, requests, cursor=str(events[-1].id) if events else context.cursor)
