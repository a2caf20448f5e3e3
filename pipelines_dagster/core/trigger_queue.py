"""Taking the webhook deliveries and domain events no run has been requested for yet.

A batch of pending rows (requested_at IS NULL) is read and marked in one
transaction, locked with FOR UPDATE SKIP LOCKED on PostgreSQL so concurrent
ticks take disjoint rows; SQLite serializes writers, which makes the same code a
serial fallback. Nothing depends on the order in which rows commit: a row that
commits late under a low id is still pending, and the next tick takes it.

A batch is marked when it commits, before Dagster has stored the tick's run
requests (the daemon keeps them in the tick from then on and resumes an
interrupted tick). A tick that dies in between, or overruns the sensor timeout,
leaves its rows taken without runs: a row taken for runs waits for them
(`awaiting_run`) until a later tick sees them in Dagster, and one that has waited
longer than the grace period is offered again under the same run keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import DomainEvent, Pipeline, PipelineTrigger, TriggerKind, WebhookDelivery
from pipelines_dagster.core.fires import DEFAULT_BUDGET, GRACE, Budget, Runs, Taken, take_within
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


Queued = type[WebhookDelivery] | type[DomainEvent]
DeliveryRow = sa.Row[int, int, int, bool, bool]
"""A delivery's id, its trigger's pipeline and workspace, and the trigger's and pipeline's switches."""
EventRow = sa.Row[int, int, str, dict[str, Any], datetime]
"""An event's id, workspace, type, payload and creation time."""


def _mark(session: Session, model: Queued, ids: list[int], now: datetime, *, awaiting: set[int]) -> None:
    """Mark rows taken at `now`; those in `awaiting` owe runs and wait for them."""
    if ids:
        session.execute(sa.update(model).where(model.id.in_(ids)).values(requested_at=now))
    if awaiting:
        session.execute(sa.update(model).where(model.id.in_(awaiting)).values(awaiting_run=True))


def _lost(model: Queued, *, now: datetime, grace: timedelta) -> list[sa.ColumnElement[bool]]:
    """Rows taken for runs longer than `grace` ago that no tick has seen yet."""
    return [model.awaiting_run == sa.true(), model.requested_at < now - grace]


def _settle(session: Session, model: Queued, ids: list[int], now: datetime, *, lost: set[int]) -> None:
    """After looking for their runs: the rows in `lost` are requested again at `now` and go on
    waiting; the others (every run seen, or none owed any more) stop waiting."""
    if settled := [row_id for row_id in ids if row_id not in lost]:
        session.execute(sa.update(model).where(model.id.in_(settled)).values(awaiting_run=False))
    if lost:
        session.execute(sa.update(model).where(model.id.in_(lost)).values(requested_at=now))


def _delivery_rows(session: Session, *where: sa.ColumnElement[bool], limit: int) -> Sequence[DeliveryRow]:
    """Up to `limit` deliveries, oldest id first, with their trigger's and pipeline's switches, locked."""
    return session.execute(
        sa.select(
            WebhookDelivery.id,
            PipelineTrigger.pipeline_id,
            PipelineTrigger.workspace_id,
            PipelineTrigger.enabled,
            Pipeline.enabled,
        )
        .join(PipelineTrigger, PipelineTrigger.id == WebhookDelivery.trigger_id)
        .join(Pipeline, Pipeline.id == PipelineTrigger.pipeline_id)
        .where(*where)
        .order_by(WebhookDelivery.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=WebhookDelivery)
    ).all()


def _delivery_taken(rows: Sequence[DeliveryRow]) -> Taken[DeliveryFire]:
    fires = [
        DeliveryFire(delivery_id=delivery_id, pipeline_id=pipeline_id, workspace_id=workspace_id)
        for delivery_id, pipeline_id, workspace_id, trigger_enabled, pipeline_enabled in rows
        if trigger_enabled and pipeline_enabled
    ]
    return Taken(
        fires=fires,
        rows=len(rows),
        skipped=len(rows) - len(fires),
        disabled_pipelines={pipeline for _, pipeline, _, on, pipeline_on in rows if on and not pipeline_on},
    )


def take_delivery_batch(sessions: sessionmaker[Session], *, limit: int, now: datetime) -> Taken[DeliveryFire]:
    """Mark up to `limit` pending deliveries, oldest id first, and commit: the runs they owe."""
    with sessions() as session, session.begin():
        rows = _delivery_rows(session, WebhookDelivery.requested_at.is_(None), limit=limit)
        taken = _delivery_taken(rows)
        _mark(session, WebhookDelivery, [row[0] for row in rows], now, awaiting={f.delivery_id for f in taken.fires})
    return taken


def offer_lost_deliveries(
    sessions: sessionmaker[Session], runs: Runs, *, limit: int, now: datetime, grace: timedelta = GRACE
) -> Taken[DeliveryFire]:
    """Up to `limit` deliveries taken longer than `grace` ago whose run `runs` has not seen: offered
    again (marked anew, waiting again); the others stop waiting."""
    with sessions() as session, session.begin():
        rows = _delivery_rows(session, *_lost(WebhookDelivery, now=now, grace=grace), limit=limit)
        fires = _delivery_taken(rows).fires
        seen = runs.seen(fires)
        lost = [fire for fire in fires if fire.run_key not in seen]
        _settle(session, WebhookDelivery, [row[0] for row in rows], now, lost={f.delivery_id for f in lost})
    return Taken(fires=lost, rows=len(lost), again=[fire.run_key for fire in lost])


def _events(session: Session, *where: sa.ColumnElement[bool], limit: int) -> Sequence[EventRow]:
    """Up to `limit` events, oldest id first, locked."""
    return session.execute(
        sa.select(
            DomainEvent.id,
            DomainEvent.workspace_id,
            DomainEvent.event_type,
            DomainEvent.payload,
            DomainEvent.created_at,
        )
        .where(*where)
        .order_by(DomainEvent.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=DomainEvent)
    ).all()


def _event_taken(session: Session, events: Sequence[EventRow], *, again: bool = False) -> Taken[EventFire]:
    """The runs the events owe: one per enabled subscribed pipeline each concerns. `again`: only the
    triggers that existed when an event was created, the ones its first take could have fired."""
    subscriptions = (
        session.execute(
            sa.select(
                PipelineTrigger.id,
                PipelineTrigger.workspace_id,
                PipelineTrigger.event_type,
                Pipeline.id,
                Pipeline.connector_id,
                Pipeline.enabled,
                PipelineTrigger.created_at,
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
    by_topic: dict[tuple[int, str | None], list[tuple[int, int, int | None, bool, datetime]]] = {}
    for trigger_id, workspace_id, event_type, pipeline_id, connector_id, enabled, created in subscriptions:
        by_topic.setdefault((workspace_id, event_type), []).append(
            (trigger_id, pipeline_id, connector_id, enabled, created)
        )
    taken: Taken[EventFire] = Taken(rows=len(events))
    for event_id, workspace_id, event_type, payload, event_created in events:
        concerned = [
            (trigger_id, pipeline_id, enabled)
            for trigger_id, pipeline_id, connector_id, enabled, created in by_topic.get((workspace_id, event_type), [])
            if concerns(payload, pipeline_id=pipeline_id, connector_id=connector_id)
            and not (again and created > event_created)
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
    return taken


def take_event_batch(sessions: sessionmaker[Session], *, limit: int, now: datetime) -> Taken[EventFire]:
    """Mark up to `limit` pending events, oldest id first, and commit: a run per subscribed pipeline concerned."""
    with sessions() as session, session.begin():
        events = _events(session, DomainEvent.requested_at.is_(None), limit=limit)
        taken = _event_taken(session, events)
        _mark(session, DomainEvent, [event.id for event in events], now, awaiting={f.event_id for f in taken.fires})
    return taken


def offer_lost_events(
    sessions: sessionmaker[Session], runs: Runs, *, limit: int, now: datetime, grace: timedelta = GRACE
) -> Taken[EventFire]:
    """Up to `limit` events taken longer than `grace` ago with a run `runs` has not seen: those runs
    offered again (the event marked anew, waiting again); events whose runs are all seen stop waiting."""
    with sessions() as session, session.begin():
        events = _events(session, *_lost(DomainEvent, now=now, grace=grace), limit=limit)
        fires = _event_taken(session, events, again=True).fires
        seen = runs.seen(fires)
        lost = [fire for fire in fires if fire.run_key not in seen]
        _settle(session, DomainEvent, [event.id for event in events], now, lost={f.event_id for f in lost})
    return Taken(fires=lost, rows=len(lost), again=[fire.run_key for fire in lost])


def take_deliveries(
    sessions: sessionmaker[Session],
    runs: Runs,
    *,
    now: datetime | None = None,
    budget: Budget = DEFAULT_BUDGET,
    grace: timedelta = GRACE,
) -> Taken[DeliveryFire]:
    """A batch of lost deliveries offered again, then every pending one within the budget, marked
    requested: the runs they owe."""
    moment = now or datetime.now(UTC)
    taken = offer_lost_deliveries(sessions, runs, limit=budget.batch_size, now=moment, grace=grace)
    taken.add(take_within(take_delivery_batch, sessions, now=moment, budget=budget))
    return taken


def take_events(
    sessions: sessionmaker[Session],
    runs: Runs,
    *,
    now: datetime | None = None,
    budget: Budget = DEFAULT_BUDGET,
    grace: timedelta = GRACE,
) -> Taken[EventFire]:
    """A batch of lost events' runs offered again, then every pending domain event within the budget,
    marked requested: the runs they owe."""
    moment = now or datetime.now(UTC)
    taken = offer_lost_events(sessions, runs, limit=budget.batch_size, now=moment, grace=grace)
    taken.add(take_within(take_event_batch, sessions, now=moment, budget=budget))
    return taken
