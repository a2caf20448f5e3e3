"""Taking the webhook deliveries and domain events no run has been requested for yet.

A batch of pending rows (requested_at IS NULL) is read and marked in one
transaction, locked with FOR UPDATE SKIP LOCKED on PostgreSQL so concurrent
ticks take disjoint rows; SQLite serializes writers, which makes the same code a
serial fallback. Nothing depends on the order in which rows commit: a row that
commits late under a low id is still pending, and the next tick takes it.

The one window left: a batch is marked when it commits, before Dagster has stored
the tick's run requests (the daemon keeps them in the tick from then on and
resumes an interrupted tick). A tick that dies in between, or overruns the sensor
timeout, leaves its rows taken without runs; hence the time budget well inside
that timeout, and each commit is the last thing before its fires are returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import DomainEvent, Pipeline, PipelineTrigger, TriggerKind, WebhookDelivery
from pipelines_dagster.core.fires import DEFAULT_BUDGET, Budget, Taken, take_within
from pipelines_dagster.runs import Trigger, event_run_key, event_tags, run_tags, webhook_run_key, webhook_tags


@dataclass(frozen=True, kw_only=True)
class DeliveryFire:
    """A webhook delivery of an enabled trigger and pipeline: one run."""

    delivery_id: int
    pipeline_id: int
    workspace_id: int

    @property
    def run_key(self) -> str:
        return webhook_run_key(self.delivery_id)

    @property
    def tags(self) -> dict[str, str]:
        return run_tags(
            pipeline_id=self.pipeline_id,
            workspace_id=self.workspace_id,
            trigger=Trigger.WEBHOOK,
            **webhook_tags(self.delivery_id),
        )


@dataclass(frozen=True, kw_only=True)
class EventFire:
    """A domain event and one enabled pipeline subscribed to it that it concerns: one run."""

    event_id: int
    event_type: str
    trigger_id: int
    pipeline_id: int
    workspace_id: int

    @property
    def run_key(self) -> str:
        return event_run_key(self.event_id, self.trigger_id)

    @property
    def tags(self) -> dict[str, str]:
        return run_tags(
            pipeline_id=self.pipeline_id,
            workspace_id=self.workspace_id,
            trigger=Trigger.EVENT,
            **event_tags(self.event_id, self.event_type),
        )


def concerns(payload: Mapping[str, Any], *, pipeline_id: int, connector_id: int | None) -> bool:
    """An event naming a pipeline or connector fires only the pipelines it names; others fire them all."""
    named_pipeline = payload.get("pipeline_id")
    named_connector = payload.get("connector_id")
    return (named_pipeline is None or named_pipeline == pipeline_id) and (
        named_connector is None or named_connector == connector_id
    )


def _mark(session: Session, model: type[WebhookDelivery] | type[DomainEvent], ids: list[int], now: datetime) -> None:
    if ids:
        session.execute(sa.update(model).where(model.id.in_(ids)).values(requested_at=now))


def take_delivery_batch(sessions: sessionmaker[Session], *, limit: int, now: datetime) -> Taken[DeliveryFire]:
    """Mark up to `limit` pending deliveries, oldest id first, and commit: the runs they owe."""
    with sessions() as session, session.begin():
        rows = session.execute(
            sa.select(
                WebhookDelivery.id,
                PipelineTrigger.pipeline_id,
                PipelineTrigger.workspace_id,
                PipelineTrigger.enabled,
                Pipeline.enabled,
            )
            .join(PipelineTrigger, PipelineTrigger.id == WebhookDelivery.trigger_id)
            .join(Pipeline, Pipeline.id == PipelineTrigger.pipeline_id)
            .where(WebhookDelivery.requested_at.is_(None))
            .order_by(WebhookDelivery.id)
            .limit(limit)
            .with_for_update(skip_locked=True, of=WebhookDelivery)
        ).all()
        fires = [
            DeliveryFire(delivery_id=delivery_id, pipeline_id=pipeline_id, workspace_id=workspace_id)
            for delivery_id, pipeline_id, workspace_id, trigger_enabled, pipeline_enabled in rows
            if trigger_enabled and pipeline_enabled
        ]
        _mark(session, WebhookDelivery, [row[0] for row in rows], now)
        taken = Taken(
            fires=fires,
            rows=len(rows),
            skipped=len(rows) - len(fires),
            disabled_pipelines={pipeline for _, pipeline, _, on, pipeline_on in rows if on and not pipeline_on},
        )
    return taken


def take_event_batch(sessions: sessionmaker[Session], *, limit: int, now: datetime) -> Taken[EventFire]:
    """Mark up to `limit` pending events, oldest id first, and commit: a run per subscribed pipeline concerned."""
    with sessions() as session, session.begin():
        events = session.execute(
            sa.select(DomainEvent.id, DomainEvent.workspace_id, DomainEvent.event_type, DomainEvent.payload)
            .where(DomainEvent.requested_at.is_(None))
            .order_by(DomainEvent.id)
            .limit(limit)
            .with_for_update(skip_locked=True, of=DomainEvent)
        ).all()
        subscriptions = (
            session.execute(
                sa.select(
                    PipelineTrigger.id,
                    PipelineTrigger.workspace_id,
                    PipelineTrigger.event_type,
                    Pipeline.id,
                    Pipeline.connector_id,
                    Pipeline.enabled,
                )
                .join(Pipeline, Pipeline.id == PipelineTrigger.pipeline_id)
                .where(
                    PipelineTrigger.kind == TriggerKind.EVENT.value,
                    PipelineTrigger.enabled.is_(True),
                    PipelineTrigger.workspace_id.in_({event.workspace_id for event in events}),
                    PipelineTrigger.event_type.in_({event.event_type for event in events}),
                )
            ).all()
            if events
            else []
        )
        by_topic: dict[tuple[int, str | None], list[tuple[int, int, int | None, bool]]] = {}
        for trigger_id, workspace_id, event_type, pipeline_id, connector_id, enabled in subscriptions:
            by_topic.setdefault((workspace_id, event_type), []).append((trigger_id, pipeline_id, connector_id, enabled))
        taken: Taken[EventFire] = Taken(rows=len(events))
        for event_id, workspace_id, event_type, payload in events:
            concerned = [
                (trigger_id, pipeline_id, enabled)
                for trigger_id, pipeline_id, connector_id, enabled in by_topic.get((workspace_id, event_type), [])
                if concerns(payload, pipeline_id=pipeline_id, connector_id=connector_id)
            ]
            taken.disabled_pipelines |= {pipeline_id for _, pipeline_id, enabled in concerned if not enabled}
            fires = [
                EventFire(
                    event_id=event_id,
                    event_type=event_type,
                    trigger_id=trigger_id,
                    pipeline_id=pipeline_id,
                    workspace_id=workspace_id,
                )
                for trigger_id, pipeline_id, enabled in concerned
                if enabled
            ]
            taken.fires += fires
            if not fires:
                taken.skipped += 1
        _mark(session, DomainEvent, [event.id for event in events], now)
    return taken


def take_deliveries(
    sessions: sessionmaker[Session], *, now: datetime | None = None, budget: Budget = DEFAULT_BUDGET
) -> Taken[DeliveryFire]:
    """Every pending webhook delivery within the budget, marked requested: the runs they owe."""
    return take_within(take_delivery_batch, sessions, now=now, budget=budget)


def take_events(
    sessions: sessionmaker[Session], *, now: datetime | None = None, budget: Budget = DEFAULT_BUDGET
) -> Taken[EventFire]:
    """Every pending domain event within the budget, marked requested: the runs they owe."""
    return take_within(take_event_batch, sessions, now=now, budget=budget)
