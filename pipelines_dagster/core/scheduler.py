"""Claiming due schedule triggers: advance each to its next fire time and say which pipelines to run.

Rows are claimed with FOR UPDATE SKIP LOCKED on PostgreSQL, so concurrent ticks
claim disjoint rows; SQLite serializes writers, which makes the same code a
serial fallback. Missed fires are not caught up: a trigger is advanced to its
next match after now, however late the tick is, and a trigger of a disabled
pipeline is advanced without a fire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.core.fires import Budget, Taken, take_within
from pipelines_dagster.core.schedule import ScheduleSpec
from pipelines_dagster.core.validation import InvalidInputError
from pipelines_dagster.runs import Trigger, run_tags, schedule_run_key, schedule_tags

# Every due trigger is claimed in the tick it falls due (no cap on rows), within the time budget;
# the sensor's comes from settings.
SCHEDULE_BUDGET = Budget(max_rows=None)


@dataclass(frozen=True, kw_only=True)
class Fire:
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


def next_fire(trigger: PipelineTrigger, *, after: datetime) -> datetime:
    """The trigger's next fire time after `after`; InvalidInputError when its schedule cannot fire.

    A row may have been written by hand or by an older release, so it is validated like new input.
    """
    return ScheduleSpec.of(trigger).validated().next_fire_after(after)


def _advance(trigger: PipelineTrigger, now: datetime) -> bool:
    """Move the trigger past now, or disable it with the reason; True when it stays live."""
    try:
        trigger.next_fire_at = next_fire(trigger, after=now)
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


def claim_due(sessions: sessionmaker[Session], *, limit: int, now: datetime) -> Taken[Fire]:
    """Claim up to `limit` due triggers, advance them and commit: the fires their enabled pipelines are owed."""
    with sessions() as session, session.begin():
        rows = session.execute(due_query(now=now, batch_size=limit)).all()
        taken: Taken[Fire] = Taken(rows=len(rows))
        for trigger, pipeline_enabled in rows:
            scheduled_for = trigger.next_fire_at
            assert scheduled_for is not None  # due_query claims only rows with next_fire_at <= now
            if not _advance(trigger, now):
                taken.skipped += 1  # an invalid schedule: the trigger is disabled with the reason
                continue
            trigger.last_fired_at = now
            if not pipeline_enabled:
                taken.skipped += 1
                taken.disabled_pipelines.add(trigger.pipeline_id)
                continue
            taken.fires.append(
                Fire(
                    trigger_id=trigger.id,
                    pipeline_id=trigger.pipeline_id,
                    workspace_id=trigger.workspace_id,
                    scheduled_for=scheduled_for,
                )
            )
        return taken


def take_due(
    sessions: sessionmaker[Session], *, now: datetime | None = None, budget: Budget = SCHEDULE_BUDGET
) -> Taken[Fire]:
    """Claim due triggers in batches until none is due or the budget is spent; each batch commits first."""
    heal_missing_next_fire(sessions, now=now or datetime.now(UTC), batch_size=budget.batch_size)
    return take_within(claim_due, sessions, now=now, budget=budget)
