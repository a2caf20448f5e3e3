"""A webhook delivery or a domain event whose pipeline is busy waits, pending, and runs after it, once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import DomainEvent, WebhookDelivery
from pipelines_dagster.core.catalog.triggers import create_event_trigger
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.fires import GRACE, Budget
from pipelines_dagster.core.triggers.queue import take_deliveries, take_events
from tests.core.triggers.test_lost_fires import alone_waiting, keys
from tests.core.triggers.test_queue import deliveries, new_pipeline, new_workspace, requested_at
from tests.support.runs import KnownRuns

T = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def test_deliveries_of_a_busy_pipeline_stay_pending_and_are_taken_once_it_is_free(sessions):
    busy_pipeline, waiting = deliveries(sessions, 2)
    free_pipeline, free = deliveries(sessions, 1)
    ours = {busy_pipeline, free_pipeline}
    busy = KnownRuns(busy=frozenset({busy_pipeline}))
    taken = take_deliveries(sessions, busy, now=T)
    assert keys(taken, ours) == [f"webhook:{free[0]}"]
    assert taken.held >= 2
    assert requested_at(sessions, WebhookDelivery, waiting) == {None}
    # Still busy a tick later: still pending.
    assert keys(take_deliveries(sessions, busy, now=T + timedelta(seconds=5)), ours) == []
    # Free: each runs once.
    assert keys(take_deliveries(sessions, KnownRuns(), now=T + timedelta(seconds=10)), ours) == [
        f"webhook:{delivery_id}" for delivery_id in waiting
    ]
    assert keys(take_deliveries(sessions, KnownRuns(), now=T + timedelta(seconds=15)), ours) == []


def test_a_lost_delivery_of_a_busy_pipeline_is_offered_again_only_once_the_pipeline_is_free(sessions):
    pipeline_id, ids = deliveries(sessions, 1)
    take_deliveries(sessions, KnownRuns(), now=T)
    alone_waiting(sessions, WebhookDelivery, ids)
    later = T + GRACE + timedelta(seconds=1)
    assert keys(take_deliveries(sessions, KnownRuns(busy=frozenset({pipeline_id})), now=later), {pipeline_id}) == []
    again = take_deliveries(sessions, KnownRuns(), now=later + timedelta(seconds=5))
    assert keys(again, {pipeline_id}) == [f"webhook:{ids[0]}"] == again.again


def test_an_event_runs_its_free_pipelines_now_and_its_busy_one_after_each_once(sessions):
    with transaction(sessions) as session:
        workspace_id = new_workspace(session)
        first, second = (new_pipeline(session, workspace_id, connector=True) for _ in range(2))
        triggers = {
            pipeline.id: create_event_trigger(
                session, workspace_id=workspace_id, pipeline_id=pipeline.id, event_type="folder.changed"
            ).id
            for pipeline in (first, second)
        }
        event_id = emit_event(session, workspace_id=workspace_id, event_type="folder.changed").id
    ours = set(triggers)
    owed = {pipeline_id: f"event:{event_id}:{trigger_id}" for pipeline_id, trigger_id in triggers.items()}

    dagster = KnownRuns(busy=frozenset({first.id}))
    tick = take_events(sessions, dagster, now=T)
    assert keys(tick, ours) == [owed[second.id]] and tick.held >= 1
    assert requested_at(sessions, DomainEvent, [event_id]) == {None}
    # The second pipeline's run exists and is running; the first is free now.
    dagster.keys.add(owed[second.id])
    dagster.busy = frozenset({second.id})
    assert keys(take_events(sessions, dagster, now=T + timedelta(seconds=5)), ours) == [owed[first.id]]
    assert requested_at(sessions, DomainEvent, [event_id]) == {T + timedelta(seconds=5)}
    dagster.keys.add(owed[first.id])
    dagster.busy = frozenset()
    assert keys(take_events(sessions, dagster, now=T + timedelta(seconds=10)), ours) == []


def test_events_a_tick_leaves_pending_are_not_read_again_by_its_later_batches(sessions):
    with transaction(sessions) as session:
        workspace_id = new_workspace(session)
        busy, free = (new_pipeline(session, workspace_id, connector=True) for _ in range(2))
        for pipeline, event_type in ((busy, "folder.changed"), (free, "document.uploaded")):
            create_event_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline.id, event_type=event_type)
        held = [emit_event(session, workspace_id=workspace_id, event_type="folder.changed").id for _ in range(3)]
        taken = [emit_event(session, workspace_id=workspace_id, event_type="document.uploaded").id for _ in range(3)]
    dagster = KnownRuns(busy=frozenset({busy.id}))
    # Batches of two: the held events come first, and the tick still reaches the others in one pass.
    tick = take_events(sessions, dagster, now=T, budget=Budget(batch_size=2, max_rows=None, seconds=5))
    assert [fire.event_id for fire in tick.fires if fire.pipeline_id == free.id] == taken
    assert requested_at(sessions, DomainEvent, held) == {None}
    assert requested_at(sessions, DomainEvent, taken) == {T}
