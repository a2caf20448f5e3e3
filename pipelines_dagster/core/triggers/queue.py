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

A row whose pipeline is busy (a run of it queued or in progress, a batch run that
covers it, a UI launch of its partition) is left pending: its run would meet the
other run's lock, and the run queue cannot hold it back behind a batch. A later
tick takes it once the pipeline is free, so it runs after, once. An event owed to
several pipelines requests the runs of the free ones and stays pending for the
busy ones; its runs already made are known by their run keys and not asked again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import DomainEvent, Pipeline, PipelineTrigger, TriggerKind, WebhookDelivery
from pipelines_dagster.core.triggers.fires import DEFAULT_BUDGET, GRACE, Budget, Runs, Taken, take_within
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


def _not_busy(busy: Set[int]) -> list[sa.ColumnElement[bool]]:
    """Deliveries of pipelines not in `busy`."""
    return [PipelineTrigger.pipeline_id.not_in(sorted(busy))] if busy else []


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


def take_delivery_batch(
    sessions: sessionmaker[Session], *, limit: int, now: datetime, busy: Set[int] = frozenset()
) -> Taken[DeliveryFire]:
    """Mark up to `limit` pending deliveries of pipelines not in `busy`, oldest id first, and commit:
    the runs they owe. Those of busy pipelines stay pending."""
    with sessions() as session, session.begin():
        rows = _delivery_rows(session, WebhookDelivery.requested_at.is_(None), *_not_busy(busy), limit=limit)
        taken = _delivery_taken(rows)
        _mark(session, WebhookDelivery, [row[0] for row in rows], now, awaiting={f.delivery_id for f in taken.fires})
    return taken


def offer_lost_deliveries(
    sessions: sessionmaker[Session], runs: Runs, *, limit: int, now: datetime, grace: timedelta = GRACE
) -> Taken[DeliveryFire]:
    """Up to `limit` deliveries taken longer than `grace` ago whose run `runs` has not seen: offered
    again (marked anew, waiting again); the others stop waiting. Those of busy pipelines wait on."""
    with sessions() as session, session.begin():
        rows = _delivery_rows(
            session, *_lost(WebhookDelivery, now=now, grace=grace), *_not_busy(runs.busy), limit=limit
        )
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


def _held_back(taken: Taken[EventFire], runs: Runs) -> set[int]:
    """The events with a run owed to a busy pipeline, which wait for it; `taken` keeps the fires to
    request now: not those, and not those a run was made for already (by an earlier tick that left
    the event waiting)."""
    owed = {fire.event_id for fire in taken.fires if fire.pipeline_id in runs.busy}
    if not owed:
        return set()
    seen = runs.seen([fire for fire in taken.fires if fire.event_id in owed])
    unseen = [fire for fire in taken.fires if fire.run_key not in seen]
    held = {fire.event_id for fire in unseen if fire.pipeline_id in runs.busy}
    taken.fires = [fire for fire in unseen if fire.pipeline_id not in runs.busy]
    taken.held += len(held)
    return held


def take_event_batch(
    sessions: sessionmaker[Session], runs: Runs, *, limit: int, now: datetime, after: int = 0
) -> tuple[Taken[EventFire], int]:
    """Mark up to `limit` pending events with ids above `after`, oldest first, and commit: a run per
    subscribed pipeline concerned. An event with a run owed to a busy pipeline stays pending (its
    other runs are requested). Also returns the highest id read, where the next batch starts."""
    with sessions() as session, session.begin():
        events = _events(session, DomainEvent.requested_at.is_(None), DomainEvent.id > after, limit=limit)
        taken = _event_taken(session, events)
        held = _held_back(taken, runs)
        marked = [event.id for event in events if event.id not in held]
        awaiting = {fire.event_id for fire in taken.fires} - held
        _mark(session, DomainEvent, marked, now, awaiting=awaiting)
    return taken, max((event.id for event in events), default=after)


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
        # A lost run of a busy pipeline is not offered yet: its event is left as it is, to be looked at again.
        waiting = {fire.event_id for fire in lost if fire.pipeline_id in runs.busy}
        lost = [fire for fire in lost if fire.pipeline_id not in runs.busy]
        settled = [event.id for event in events if event.id not in waiting]
        _settle(session, DomainEvent, settled, now, lost={f.event_id for f in lost} - waiting)
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
    taken.add(take_within(partial(take_delivery_batch, busy=runs.busy), sessions, now=moment, budget=budget))
    if runs.busy:
        with sessions() as session:
            taken.held = (
                session.scalar(
                    sa.select(sa.func.count())
                    .select_from(WebhookDelivery)
                    .join(PipelineTrigger, PipelineTrigger.id == WebhookDelivery.trigger_id)
                    .where(WebhookDelivery.requested_at.is_(None), PipelineTrigger.pipeline_id.in_(sorted(runs.busy)))
                )
                or 0
            )
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
    after = 0

    def batch(sessions: sessionmaker[Session], *, limit: int, now: datetime) -> Taken[EventFire]:
        # Past the events an earlier batch of this tick left pending, so none is read twice.
        nonlocal after
        taken, after = take_event_batch(sessions, runs, limit=limit, now=now, after=after)
        return taken

    taken.add(take_within(batch, sessions, now=moment, budget=budget))
    return taken
