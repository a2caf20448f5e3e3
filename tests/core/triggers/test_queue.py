"""Taking pending webhook deliveries and domain events: each once, whatever order they committed in."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import DomainEvent, Pipeline, PipelineTrigger, WebhookDelivery
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.triggers import create_event_trigger
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.fires import Budget
from pipelines_dagster.core.triggers.queue import concerns, take_deliveries, take_events
from tests.support.runs import every_run
from tests.support.webhooks import create_webhook, deliver

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def new_pipeline(session, workspace_id: int, *, connector: bool = False) -> Pipeline:
    connector_id = (
        create_connector(
            session, workspace_id=workspace_id, connector_type="webcrawler", urls=["https://example.com/"]
        ).id
        if connector
        else None
    )
    return create_pipeline(
        session, workspace_id=workspace_id, connector_id=connector_id, name=f"p-{uuid.uuid4().hex[:6]}"
    )


def new_workspace(session) -> int:
    return create_workspace(session, name="acme", owner_user_id="u").workspace.id


def deliveries(sessions, count: int) -> tuple[int, list[int]]:
    """(pipeline id, delivery ids) of `count` deliveries to a new pipeline's webhook."""
    with transaction(sessions) as session:
        pipeline = new_pipeline(session, new_workspace(session))
        hook = create_webhook(session, workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id)
        return pipeline.id, [deliver(session, hook, f'{{"n": {n}}}'.encode()) for n in range(count)]


def requested_at(sessions, model, ids: list[int]) -> set[datetime | None]:
    with sessions() as session:
        return set(session.scalars(sa.select(model.requested_at).where(model.id.in_(ids))))


def test_pending_deliveries_are_taken_once_in_id_order_and_marked(sessions):
    pipeline_id, ids = deliveries(sessions, 3)
    taken = take_deliveries(sessions, every_run(), now=NOW)
    mine = [fire for fire in taken.fires if fire.pipeline_id == pipeline_id]
    assert [fire.delivery_id for fire in mine] == ids
    assert [fire.run_key for fire in mine] == [f"webhook:{delivery_id}" for delivery_id in ids]
    assert requested_at(sessions, WebhookDelivery, ids) == {NOW}
    assert not [fire for fire in take_deliveries(sessions, every_run()).fires if fire.pipeline_id == pipeline_id]


def test_a_delivery_of_a_disabled_trigger_or_pipeline_is_taken_and_fires_nothing(sessions):
    off_trigger, trigger_ids = deliveries(sessions, 1)
    off_pipeline, pipeline_ids = deliveries(sessions, 2)
    with transaction(sessions) as session:
        session.execute(
            sa.update(PipelineTrigger).where(PipelineTrigger.pipeline_id == off_trigger).values(enabled=False)
        )
        session.get(Pipeline, off_pipeline).enabled = False
    taken = take_deliveries(sessions, every_run(), now=NOW)
    assert not [fire for fire in taken.fires if fire.pipeline_id in {off_trigger, off_pipeline}]
    assert taken.skipped >= 3 and taken.rows >= 3
    assert requested_at(sessions, WebhookDelivery, trigger_ids + pipeline_ids) == {NOW}


def test_takes_loop_over_batches_until_the_row_budget_is_spent(sessions):
    take_deliveries(sessions, every_run())  # what other tests left pending on a shared database
    _pipeline_id, ids = deliveries(sessions, 7)
    first = take_deliveries(sessions, every_run(), budget=Budget(batch_size=2, max_rows=5))
    assert first.rows == 5 and [fire.delivery_id for fire in first.fires] == ids[:5]
    rest = take_deliveries(sessions, every_run(), budget=Budget(batch_size=2))
    assert [fire.delivery_id for fire in rest.fires] == ids[5:]
    assert take_deliveries(sessions, every_run()).rows == 0


def test_a_spent_time_budget_takes_nothing(sessions):
    _, ids = deliveries(sessions, 1)
    assert take_deliveries(sessions, every_run(), budget=Budget(seconds=0)).rows == 0
    assert requested_at(sessions, WebhookDelivery, ids) == {None}


def test_an_event_fires_each_enabled_subscriber_it_concerns(sessions):
    with transaction(sessions) as session:
        workspace_id = new_workspace(session)
        named, unnamed, disabled, unsubscribed = (new_pipeline(session, workspace_id, connector=True) for _ in range(4))
        disabled.enabled = False
        triggers = {
            pipeline.id: create_event_trigger(
                session, workspace_id=workspace_id, pipeline_id=pipeline.id, event_type="connector.urls_changed"
            ).id
            for pipeline in (named, unnamed, disabled)
        }
        for_named = emit_event(
            session,
            workspace_id=workspace_id,
            event_type="connector.urls_changed",
            payload={"connector_id": named.connector_id},
        ).id
        for_all = emit_event(session, workspace_id=workspace_id, event_type="connector.urls_changed").id
        unheard = emit_event(session, workspace_id=workspace_id, event_type="folder.changed").id
        ours = {named.id, unnamed.id, disabled.id, unsubscribed.id}
    taken = take_events(sessions, every_run(), now=NOW)
    fired = {(fire.event_id, fire.pipeline_id, fire.run_key) for fire in taken.fires if fire.pipeline_id in ours}
    assert fired == {
        (for_named, named.id, f"event:{for_named}:{triggers[named.id]}"),
        (for_all, named.id, f"event:{for_all}:{triggers[named.id]}"),
        (for_all, unnamed.id, f"event:{for_all}:{triggers[unnamed.id]}"),
    }
    assert {fire.event_type for fire in taken.fires if fire.pipeline_id in ours} == {"connector.urls_changed"}
    assert taken.skipped >= 1
    assert requested_at(sessions, DomainEvent, [for_named, for_all, unheard]) == {NOW}
    assert not [fire for fire in take_events(sessions, every_run()).fires if fire.pipeline_id in ours]


@pytest.mark.parametrize(
    ("payload", "fires"),
    [
        ({}, True),
        ({"pipeline_id": 7}, True),
        ({"pipeline_id": 8}, False),
        ({"connector_id": 3}, True),
        ({"connector_id": 4}, False),
        ({"pipeline_id": 7, "connector_id": 4}, False),
    ],
)
def test_an_event_concerns_the_pipelines_and_connectors_it_names(payload, fires):
    assert concerns(payload, pipeline_id=7, connector_id=3) is fires


def impatient(postgres_engine: sa.Engine):
    """Sessions that give up on a row lock after 3 s instead of waiting on it."""
    engine = sa.create_engine(postgres_engine.url, connect_args={"options": "-c lock_timeout=3000"})
    return engine, session_factory(engine)


def test_rows_locked_by_another_tick_are_skipped_not_waited_for(postgres_engine):
    sessions = session_factory(postgres_engine)
    pipeline_id, ids = deliveries(sessions, 6)
    engine, quick = impatient(postgres_engine)
    try:
        with sessions() as holder, holder.begin():
            holder.execute(sa.select(WebhookDelivery.id).where(WebhookDelivery.id.in_(ids[:3])).with_for_update())
            taken = take_deliveries(quick, every_run())
            assert [fire.delivery_id for fire in taken.fires if fire.pipeline_id == pipeline_id] == ids[3:]
        assert [fire.delivery_id for fire in take_deliveries(quick, every_run()).fires] == ids[:3]
    finally:
        engine.dispose()


def test_a_row_committed_after_a_higher_id_was_taken_is_still_taken(postgres_engine):
    sessions = session_factory(postgres_engine)
    with transaction(sessions) as session:
        workspace_id = new_workspace(session)
    with sessions() as late, late.begin():
        lower = emit_event(late, workspace_id=workspace_id, event_type="folder.changed").id
        with transaction(sessions) as session:
            higher = emit_event(session, workspace_id=workspace_id, event_type="folder.changed").id
        assert lower < higher
        take_events(sessions, every_run())
        assert requested_at(sessions, DomainEvent, [higher]) != {None}
    assert requested_at(sessions, DomainEvent, [lower]) == {None}
    take_events(sessions, every_run())
    assert requested_at(sessions, DomainEvent, [lower]) != {None}


def test_two_concurrent_takers_take_disjoint_rows(postgres_engine):
    sessions = session_factory(postgres_engine)
    pipeline_id, ids = deliveries(sessions, 60)
    barrier = threading.Barrier(2)
    taken: list[list[int]] = [[], []]

    def tick(slot: int) -> None:
        barrier.wait()
        while (batch := take_deliveries(sessions, every_run(), budget=Budget(batch_size=5, max_rows=5))).rows:
            taken[slot] += [fire.delivery_id for fire in batch.fires if fire.pipeline_id == pipeline_id]

    threads = [threading.Thread(target=tick, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(taken[0]).isdisjoint(taken[1])
    assert sorted(taken[0] + taken[1]) == ids
