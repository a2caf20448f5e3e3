"""The de-dup guard: one scheduler per connector, restored symmetrically."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, Pipeline, PipelineTrigger
from pipelines_dagster.core import catalog

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def connector_with_own_indexing(sessions) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = catalog.create_workspace(session, name="acme", owner_user_id="u").workspace
        connector = catalog.create_connector(
            session, workspace_id=workspace.id, connector_type="webcrawler",
            urls=["https://example.com/"], index_every_minutes=30, now=NOW,
        )
        return workspace.id, connector.id


def own_schedule(sessions, connector_id: int) -> tuple[PipelineTrigger, Connector]:
    with sessions() as session:
        trigger = session.scalars(
            sa.select(PipelineTrigger).join(Pipeline)
            .where(Pipeline.connector_id == connector_id, Pipeline.system_managed.is_(True))
        ).one()
        return trigger, session.get(Connector, connector_id)


def user_pipeline(sessions, workspace_id: int, connector_id: int, name: str) -> int:
    with transaction(sessions) as session:
        return catalog.create_pipeline(
            session, workspace_id=workspace_id, connector_id=connector_id, name=name, now=NOW
        ).id


def set_enabled(sessions, workspace_id: int, pipeline_id: int, enabled: bool, now: datetime = NOW) -> None:
    with transaction(sessions) as session:
        catalog.set_pipeline_enabled(session, workspace_id=workspace_id, pipeline_id=pipeline_id,
                                     enabled=enabled, now=now)


def test_a_connector_with_periodic_indexing_gets_a_system_pipeline_into_the_kb_root(sessions):
    _, connector_id = connector_with_own_indexing(sessions)
    trigger, connector = own_schedule(sessions, connector_id)
    assert (trigger.kind, trigger.interval_minutes, trigger.enabled) == ("schedule", 30, True)
    assert trigger.next_fire_at == NOW + timedelta(minutes=30) == connector.next_scheduled_at
    with sessions() as session:
        pipeline = session.get(Pipeline, trigger.pipeline_id)
        assert (pipeline.save_to_kb, pipeline.destination_folder_id, pipeline.system_managed) == (True, None, True)


def test_creating_a_user_pipeline_turns_the_connectors_own_schedule_off(sessions):
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    user_pipeline(sessions, workspace_id, connector_id, "mine")
    trigger, connector = own_schedule(sessions, connector_id)
    assert not trigger.enabled and trigger.disabled_reason == catalog.DEDUP_REASON
    assert trigger.next_fire_at is None
    assert (connector.periodic_indexing_enabled, connector.next_scheduled_at) == (False, None)


def test_a_disabled_user_pipeline_does_not_take_over(sessions):
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    with transaction(sessions) as session:
        catalog.create_pipeline(session, workspace_id=workspace_id, connector_id=connector_id, name="off",
                                enabled=False)
    assert own_schedule(sessions, connector_id)[0].enabled


def test_the_schedule_returns_only_when_the_last_user_pipeline_lets_go(sessions):
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    first = user_pipeline(sessions, workspace_id, connector_id, "first")
    second = user_pipeline(sessions, workspace_id, connector_id, "second")
    set_enabled(sessions, workspace_id, first, False)
    assert not own_schedule(sessions, connector_id)[0].enabled
    later = NOW + timedelta(hours=2)
    with transaction(sessions) as session:
        catalog.delete_pipeline(session, workspace_id=workspace_id, pipeline_id=second, now=later)
    trigger, connector = own_schedule(sessions, connector_id)
    assert trigger.enabled and trigger.disabled_reason is None
    assert trigger.next_fire_at == later + timedelta(minutes=30) == connector.next_scheduled_at
    assert connector.periodic_indexing_enabled
    set_enabled(sessions, workspace_id, first, True)
    assert not own_schedule(sessions, connector_id)[0].enabled


def test_a_schedule_switched_off_for_another_reason_is_not_revived(sessions):
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    with transaction(sessions) as session:
        trigger = session.scalars(
            sa.select(PipelineTrigger).join(Pipeline)
            .where(Pipeline.connector_id == connector_id, Pipeline.system_managed.is_(True))
        ).one()
        trigger.enabled, trigger.disabled_reason = False, "turned off by the operator"
    pipeline_id = user_pipeline(sessions, workspace_id, connector_id, "mine")
    set_enabled(sessions, workspace_id, pipeline_id, False)
    trigger, _ = own_schedule(sessions, connector_id)
    assert not trigger.enabled and trigger.disabled_reason == "turned off by the operator"


def test_a_connector_without_periodic_indexing_is_untouched(sessions):
    with transaction(sessions) as session:
        workspace = catalog.create_workspace(session, name="acme", owner_user_id="u").workspace
        connector = catalog.create_connector(session, workspace_id=workspace.id, connector_type="webcrawler",
                                             urls=["https://example.com/"])
        ids = workspace.id, connector.id
    pipeline_id = user_pipeline(sessions, *ids, "mine")
    set_enabled(sessions, ids[0], pipeline_id, False)
    with sessions() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Pipeline)
                              .where(Pipeline.connector_id == ids[1])) == 1
        assert session.get(Connector, ids[1]).periodic_indexing_enabled is False


def test_a_pipeline_over_an_ineligible_connector_type_is_refused_and_nothing_is_written(sessions, monkeypatch):
    from pipelines_dagster.core import connector_types
    from pipelines_dagster.core.validation import InvalidInputError

    workspace_id, connector_id = connector_with_own_indexing(sessions)
    monkeypatch.setitem(connector_types.PIPELINE_AVAILABILITY, "webcrawler", connector_types.Availability.MIGRATING)
    with sessions() as session:
        before = session.scalar(sa.select(sa.func.count()).select_from(Pipeline).where(Pipeline.workspace_id == workspace_id))
    try:
        user_pipeline(sessions, workspace_id, connector_id, "docs")
    except InvalidInputError as refused:
        assert refused.field == "connector_id"
        assert refused.message == "connector type webcrawler is migrating and is not eligible for pipelines"
    else:
        raise AssertionError("a pipeline over a migrating connector type was created")
    trigger, connector = own_schedule(sessions, connector_id)
    assert trigger.enabled and connector.periodic_indexing_enabled
    with sessions() as session:
        assert session.scalar(
            sa.select(sa.func.count()).select_from(Pipeline).where(Pipeline.workspace_id == workspace_id)
        ) == before
