"""Fires marked taken whose tick died before returning them: offered again after the grace period,
under the same run keys, until a tick sees their runs; and a tick looks only at marks still waiting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import DomainEvent, Pipeline, PipelineTrigger, WebhookDelivery
from pipelines_dagster.core.catalog.triggers import create_event_trigger
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.fires import GRACE
from pipelines_dagster.core.triggers.queue import take_deliveries, take_events
from pipelines_dagster.core.triggers.scheduler import take_due
from tests.core.triggers.test_queue import deliveries, new_pipeline, new_workspace
from tests.core.triggers.test_scheduler import pipelines_with_triggers
from tests.support.runs import KnownRuns

T = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
LATER = T + GRACE + timedelta(seconds=1)


def alone_waiting(sessions, model, ids: list[int]) -> None:
    """Rows other tests left waiting on a shared database stop waiting, so a batch finds ours."""
    with transaction(sessions) as session:
        if model is PipelineTrigger:
            session.execute(sa.update(model).where(model.id.not_in(ids)).values(awaiting_run_for=None))
        else:
            session.execute(sa.update(model).where(model.id.not_in(ids)).values(awaiting_run=False))


def waiting(sessions, model, ids: list[int]) -> dict[int, bool]:
    with sessions() as session:
        return {
            row.id: row.awaiting_run
            for row in session.execute(sa.select(model.id, model.awaiting_run).where(model.id.in_(ids)))
        }


def keys(taken, ours: set[int]) -> list[str]:
    return [fire.run_key for fire in taken.fires if fire.pipeline_id in ours]


def test_a_delivery_whose_tick_died_is_offered_again_after_the_grace_period_until_its_run_is_seen(sessions):
    pipeline_id, ids = deliveries(sessions, 2)
    owed = [f"webhook:{delivery_id}" for delivery_id in ids]
    dagster = KnownRuns()
    assert keys(take_deliveries(sessions, dagster, now=T), {pipeline_id}) == owed
    # The tick died: Dagster never heard of these runs.
    alone_waiting(sessions, WebhookDelivery, ids)
    assert keys(take_deliveries(sessions, dagster, now=T + GRACE - timedelta(seconds=1)), {pipeline_id}) == []
    again = take_deliveries(sessions, dagster, now=LATER)
    assert keys(again, {pipeline_id}) == owed and again.again == owed
    assert waiting(sessions, WebhookDelivery, ids) == dict.fromkeys(ids, True)
    # Offered again at LATER: looked for once more only a grace period after that.
    assert keys(take_deliveries(sessions, dagster, now=LATER + timedelta(minutes=1)), {pipeline_id}) == []
    dagster.keys |= set(owed)  # the tick that offered them returned: their runs exist
    assert keys(take_deliveries(sessions, dagster, now=LATER + GRACE * 2), {pipeline_id}) == []
    assert waiting(sessions, WebhookDelivery, ids) == dict.fromkeys(ids, False)
    dagster.keys.clear()  # even runs deleted from Dagster later are not asked about again
    dagster.asked.clear()
    assert keys(take_deliveries(sessions, dagster, now=LATER + GRACE * 4), {pipeline_id}) == []
    assert not set(owed) & set(dagster.asked)


def test_a_delivery_whose_run_was_created_is_not_offered_again(sessions):
    pipeline_id, ids = deliveries(sessions, 1)
    taken = take_deliveries(sessions, KnownRuns(), now=T)
    alone_waiting(sessions, WebhookDelivery, ids)
    ran = KnownRuns(keys={fire.run_key for fire in taken.fires})
    assert keys(take_deliveries(sessions, ran, now=LATER), {pipeline_id}) == []
    assert ran.asked == [f"webhook:{ids[0]}"]
    assert waiting(sessions, WebhookDelivery, ids) == {ids[0]: False}


def test_an_event_offers_again_only_its_runs_not_seen_and_only_to_its_subscribers_at_the_time(sessions):
    with transaction(sessions) as session:
        workspace_id = new_workspace(session)
        first, second, newcomer = (new_pipeline(session, workspace_id, connector=True) for _ in range(3))
        triggers = [
            create_event_trigger(
                session, workspace_id=workspace_id, pipeline_id=pipeline.id, event_type="folder.changed"
            ).id
            for pipeline in (first, second)
        ]
        event_id = emit_event(session, workspace_id=workspace_id, event_type="folder.changed").id
    ours = {first.id, second.id, newcomer.id}
    owed = [f"event:{event_id}:{trigger_id}" for trigger_id in triggers]
    assert sorted(keys(take_events(sessions, KnownRuns(), now=T), ours)) == sorted(owed)
    alone_waiting(sessions, DomainEvent, [event_id])
    with transaction(sessions) as session:
        # Subscribed after the event was taken: the event's first take could not have fired it.
        create_event_trigger(session, workspace_id=workspace_id, pipeline_id=newcomer.id, event_type="folder.changed")
    half = KnownRuns(keys={owed[0]})
    assert keys(take_events(sessions, half, now=LATER), ours) == [owed[1]]
    assert waiting(sessions, DomainEvent, [event_id]) == {event_id: True}
    half.keys.add(owed[1])
    assert keys(take_events(sessions, half, now=LATER + GRACE * 2), ours) == []
    assert waiting(sessions, DomainEvent, [event_id]) == {event_id: False}


def awaiting_fire(sessions, trigger_id: int) -> datetime | None:
    with sessions() as session:
        return session.get(PipelineTrigger, trigger_id).awaiting_run_for


def test_a_schedule_fire_whose_tick_died_is_offered_again_under_the_run_key_it_was_claimed_with(sessions):
    due = T - timedelta(minutes=1)
    [trigger_id] = pipelines_with_triggers(sessions, 1, cron="0 9 * * *", timezone="UTC", next_fire_at=due)
    dagster = KnownRuns()
    [fire] = [f for f in take_due(sessions, dagster, now=T).fires if f.trigger_id == trigger_id]
    assert awaiting_fire(sessions, trigger_id) == due
    alone_waiting(sessions, PipelineTrigger, [trigger_id])
    assert [f for f in take_due(sessions, dagster, now=T + GRACE / 2).fires if f.trigger_id == trigger_id] == []
    again = take_due(sessions, dagster, now=LATER)
    [lost] = [f for f in again.fires if f.trigger_id == trigger_id]
    assert (lost.run_key, lost.scheduled_for, again.again) == (fire.run_key, due, [fire.run_key])
    dagster.keys.add(fire.run_key)
    assert [f for f in take_due(sessions, dagster, now=LATER + GRACE * 2).fires if f.trigger_id == trigger_id] == []
    assert awaiting_fire(sessions, trigger_id) is None


def test_a_lost_schedule_fire_is_superseded_by_its_triggers_next_fire(sessions):
    [trigger_id] = pipelines_with_triggers(sessions, 1, next_fire_at=T - timedelta(minutes=1))  # every 5 min
    take_due(sessions, KnownRuns(), now=T)
    alone_waiting(sessions, PipelineTrigger, [trigger_id])
    # By LATER the trigger is due again (09:05): that fire runs, the lost one is not caught up.
    taken = take_due(sessions, KnownRuns(), now=LATER)
    assert [f.scheduled_for for f in taken.fires if f.trigger_id == trigger_id] == [T + timedelta(minutes=5)]
    assert taken.again == []
    assert awaiting_fire(sessions, trigger_id) == T + timedelta(minutes=5)


def test_a_lost_schedule_fire_of_a_busy_or_disabled_pipeline_stops_waiting(sessions):
    busy, disabled = pipelines_with_triggers(sessions, 2, cron="0 9 * * *", timezone="UTC", next_fire_at=T)
    take_due(sessions, KnownRuns(), now=T)
    alone_waiting(sessions, PipelineTrigger, [busy, disabled])
    with transaction(sessions) as session:
        session.get(Pipeline, session.get(PipelineTrigger, disabled).pipeline_id).enabled = False
        busy_pipeline = session.get(PipelineTrigger, busy).pipeline_id
    taken = take_due(sessions, KnownRuns(busy=frozenset({busy_pipeline})), now=LATER)
    assert [f for f in taken.fires if f.trigger_id in {busy, disabled}] == []
    assert taken.busy == [f"schedule:{busy}:{T.isoformat()}"]
    assert awaiting_fire(sessions, busy) is None and awaiting_fire(sessions, disabled) is None


def test_a_tick_asks_only_about_marks_still_waiting_however_many_rows_were_taken(sessions):
    pipeline_id, [lost] = deliveries(sessions, 1)
    with sessions() as session:
        trigger_id, workspace_id = session.execute(
            sa.select(WebhookDelivery.trigger_id, WebhookDelivery.workspace_id).where(WebhookDelivery.id == lost)
        ).one()
    with transaction(sessions) as session:
        # 12,000 deliveries taken long ago whose runs were seen.
        session.execute(
            sa.insert(WebhookDelivery),
            [
                {
                    "workspace_id": workspace_id,
                    "trigger_id": trigger_id,
                    "dedupe_key": f"old-{n}",
                    "payload": b"{}",
                    "headers": {},
                    "received_at": T - timedelta(days=1),
                    "requested_at": T - timedelta(days=1),
                    "awaiting_run": False,
                }
                for n in range(12_000)
            ],
        )
    take_deliveries(sessions, KnownRuns(), now=T)
    alone_waiting(sessions, WebhookDelivery, [lost])
    dagster = KnownRuns()
    assert keys(take_deliveries(sessions, dagster, now=LATER), {pipeline_id}) == [f"webhook:{lost}"]
    assert dagster.asked == [f"webhook:{lost}"]
