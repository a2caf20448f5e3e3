"""Claiming due schedule triggers: advance each to its next fire time and say which pipelines to run.

Rows are claimed with FOR UPDATE SKIP LOCKED on PostgreSQL, so concurrent ticks
claim disjoint rows; SQLite serializes writers, which makes the same code a
serial fallback. Missed fires are not caught up: a trigger is advanced to its
next fire after now, however late the tick is (a cron to its next match, an
interval to its due time plus whole periods), and a trigger of a disabled or
busy pipeline is advanced without a fire.

A claimed fire stays on its trigger (`awaiting_run_for`) until a tick sees its
run; one whose tick died before returning it is offered again under its run
key, unless the trigger has come due again since: its new fire is the run then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.triggers.fires import GRACE, Budget, Runs, Taken, take_within
from pipelines_dagster.runs import Trigger, run_tags, schedule_run_key, schedule_tags

# Every due trigger is claimed in the tick it falls due (no cap on rows), within the time budget;
# the sensor's comes from settings.
SCHEDULE_BUDGET = Budget(max_rows=None)


@dataclass(frozen=True, kw_only=True)
class ScheduledFire:
    """One due fire of a schedule trigger, already advanced in the database."""

    trigger_id: int
    pipeline_id: int
    workspace_id: int
    scheduled_for: datetime

    @property
    def run_key(self) -> str:
        return schedule_run_key(self.trigger_id, self.scheduled_for)

    @property
    def tags(self) -> dict[str, str]:
        return run_tags(
            pipeline_id=self.pipeline_id,
            workspace_id=self.workspace_id,
            trigger=Trigger.SCHEDULED,
            **schedule_tags(self.scheduled_for),
        )


def fire_of(trigger: PipelineTrigger, scheduled_for: datetime) -> ScheduledFire:
    return ScheduledFire(
        trigger_id=trigger.id,
        pipeline_id=trigger.pipeline_id,
        workspace_id=trigger.workspace_id,
        scheduled_for=scheduled_for,
    )


def next_fire(trigger: PipelineTrigger, *, after: datetime, due: datetime | None = None) -> datetime:
    """The trigger's next fire time after `after`, an interval counting from `due` (the fire being
    claimed); InvalidInputError when its schedule cannot fire.

    A row may have been written by hand or by an older release, so it is validated like new input.
    """
    return ScheduleSpec.of(trigger).validated().next_fire_after(after, due=due)


def _advance(trigger: PipelineTrigger, now: datetime, *, due: datetime | None = None) -> bool:
    """Move the trigger past now, or disable it with the reason; True when it stays live."""
    try:
        trigger.next_fire_at = next_fire(trigger, after=now, due=due)
    except InvalidInputError as exc:
        trigger.enabled = False
        trigger.next_fire_at = None
        trigger.disabled_reason = f"invalid schedule, trigger disabled: {exc.message}"
        return False
    return True


def heal_missing_next_fire(sessions: sessionmaker[Session], *, now: datetime, batch_size: int) -> int:
    """Give enabled schedule triggers without a next fire time one (new rows, edited schedules)."""
    with sessions() as session, session.begin():
        triggers = session.scalars(
            sa.select(PipelineTrigger)
            .where(
                PipelineTrigger.kind == TriggerKind.SCHEDULE.value,
                PipelineTrigger.enabled.is_(True),
                PipelineTrigger.next_fire_at.is_(None),
            )
            .limit(batch_size)
            .with_for_update(skip_locked=True)
        ).all()
        for trigger in triggers:
            _advance(trigger, now)
        return len(triggers)


def due_query(*, now: datetime, batch_size: int) -> sa.Select[PipelineTrigger, bool]:
    """Due triggers with their pipeline's switch, locked for this transaction, skipping rows another holds."""
    return (
        sa.select(PipelineTrigger, Pipeline.enabled)
        .join(Pipeline, Pipeline.id == PipelineTrigger.pipeline_id)
        .where(
            PipelineTrigger.kind == TriggerKind.SCHEDULE.value,
            PipelineTrigger.enabled.is_(True),
            PipelineTrigger.next_fire_at <= now,
            # Defense in depth: a pipeline without a connector (uploads) has nothing to fetch, so a
            # schedule set on it would only start runs that fail; it is never claimed.
            Pipeline.connector_id.is_not(None),
        )
        .order_by(PipelineTrigger.next_fire_at)
        .limit(batch_size)
        .with_for_update(skip_locked=True, of=PipelineTrigger)
    )


def claim_due(
    sessions: sessionmaker[Session], *, limit: int, now: datetime, busy: set[int] | None = None
) -> Taken[ScheduledFire]:
    """Claim up to `limit` due triggers, advance them and commit: the fires their enabled pipelines are owed.

    A fire of a pipeline in `busy` (a run queued or in progress, or a fire taken earlier in the
    tick: this adds each fire's pipeline) is dropped, its trigger advanced all the same.
    """
    busy = set() if busy is None else busy
    with sessions() as session, session.begin():
        rows = session.execute(due_query(now=now, batch_size=limit)).all()
        taken: Taken[ScheduledFire] = Taken(rows=len(rows))
        for trigger, pipeline_enabled in rows:
            scheduled_for = trigger.next_fire_at
            assert scheduled_for is not None  # due_query claims only rows with next_fire_at <= now
            # A fire claimed before and still waiting for its run is superseded by this one.
            trigger.awaiting_run_for = None
            if not _advance(trigger, now, due=scheduled_for):
                taken.skipped += 1  # an invalid schedule: the trigger is disabled with the reason
                continue
            trigger.last_fired_at = now
            if not pipeline_enabled:
                taken.skipped += 1
                taken.disabled_pipelines.add(trigger.pipeline_id)
                continue
            fire = fire_of(trigger, scheduled_for)
            if fire.pipeline_id in busy:
                taken.busy.append(fire.run_key)
                continue
            busy.add(fire.pipeline_id)
            trigger.awaiting_run_for = scheduled_for
            taken.fires.append(fire)
        return taken


def lost_query(*, now: datetime, grace: timedelta, batch_size: int) -> sa.Select[PipelineTrigger, bool]:
    """Triggers whose claimed fire has waited longer than `grace` for its run, locked as `due_query` locks."""
    return (
        sa.select(PipelineTrigger, Pipeline.enabled)
        .join(Pipeline, Pipeline.id == PipelineTrigger.pipeline_id)
        .where(
            PipelineTrigger.awaiting_run_for.is_not(None),
            PipelineTrigger.last_fired_at < now - grace,
            # A trigger due again is claimed instead: its new fire supersedes the lost one.
            sa.or_(PipelineTrigger.next_fire_at.is_(None), PipelineTrigger.next_fire_at > now),
        )
        .order_by(PipelineTrigger.id)
        .limit(batch_size)
        .with_for_update(skip_locked=True, of=PipelineTrigger)
    )


def offer_lost(
    sessions: sessionmaker[Session],
    runs: Runs,
    *,
    limit: int,
    now: datetime,
    grace: timedelta = GRACE,
    busy: set[int] | None = None,
) -> Taken[ScheduledFire]:
    """Up to `limit` claimed fires that have waited longer than `grace` and have no run in `runs`:
    offered again under the run key they were claimed with, and waiting again. A fire whose run is
    seen stops waiting, as does one that would fire nothing now (its trigger or pipeline disabled
    since, or the pipeline busy, as for a fresh claim)."""
    busy = set() if busy is None else busy
    with sessions() as session, session.begin():
        rows = session.execute(lost_query(now=now, grace=grace, batch_size=limit)).all()
        waiting = [
            (trigger, fire_of(trigger, trigger.awaiting_run_for))
            for trigger, pipeline_enabled in rows
            if trigger.enabled and pipeline_enabled and trigger.awaiting_run_for is not None
        ]
        seen = runs.seen([fire for _, fire in waiting])
        for trigger, _ in rows:
            trigger.awaiting_run_for = None
        taken: Taken[ScheduledFire] = Taken()
        for trigger, fire in waiting:
            if fire.run_key in seen:
                continue
            if fire.pipeline_id in busy:
                taken.busy.append(fire.run_key)
                continue
            busy.add(fire.pipeline_id)
            # Offered again: its run is looked for after another grace period, as after a claim.
            trigger.awaiting_run_for, trigger.last_fired_at = fire.scheduled_for, now
            taken.fires.append(fire)
            taken.again.append(fire.run_key)
        return taken


def take_due(
    sessions: sessionmaker[Session],
    runs: Runs,
    *,
    now: datetime | None = None,
    budget: Budget = SCHEDULE_BUDGET,
    grace: timedelta = GRACE,
) -> Taken[ScheduledFire]:
    """Offer lost fires again, then claim due triggers in batches until none is due or the budget is
    spent, each batch committed first: at most one fire per pipeline, none for a busy one."""
    moment = now or datetime.now(UTC)
    heal_missing_next_fire(sessions, now=moment, batch_size=budget.batch_size)
    busy = set(runs.busy)
    taken = offer_lost(sessions, runs, limit=budget.batch_size, now=moment, grace=grace, busy=busy)
    taken.add(take_within(partial(claim_due, busy=busy), sessions, now=moment, budget=budget))
    return taken
