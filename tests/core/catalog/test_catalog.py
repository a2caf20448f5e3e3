"""The de-dup guard (one scheduler per connector, restored symmetrically) and the pipeline-editing rules."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import Connector, Pipeline, PipelineTrigger
from pipelines_dagster.core.catalog.connectors import DEDUP_REASON, create_connector, initial_urls
from pipelines_dagster.core.catalog.folders import get_or_create_folder
from pipelines_dagster.core.catalog.pipelines import (
    PipelineChanges,
    SystemManagedError,
    create_pipeline,
    delete_pipeline,
    set_pipeline_enabled,
    update_pipeline,
)
from pipelines_dagster.core.catalog.retry import RetryPolicy, validate_retry_policy
from pipelines_dagster.core.catalog.schedules import ScheduleSpec, schedule_triggers
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.errors import InvalidInputError, NotFoundError

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def connector_with_own_indexing(sessions) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="u").workspace
        connector = create_connector(
            session,
            workspace_id=workspace.id,
            connector_type="webcrawler",
            urls=["https://example.com/"],
            index_every_minutes=30,
            now=NOW,
        )
        return workspace.id, connector.id


def own_schedule(sessions, connector_id: int) -> tuple[PipelineTrigger, Connector]:
    with sessions() as session:
        trigger = session.scalars(
            sa.select(PipelineTrigger)
            .join(Pipeline)
            .where(
                Pipeline.connector_id == connector_id,
                Pipeline.system_managed.is_(True),
                PipelineTrigger.kind == "schedule",
            )
        ).one()
        return trigger, session.get(Connector, connector_id)


def user_pipeline(sessions, workspace_id: int, connector_id: int, name: str, **fields) -> int:
    with transaction(sessions) as session:
        return create_pipeline(
            session, workspace_id=workspace_id, connector_id=connector_id, name=name, now=NOW, **fields
        ).id


def set_enabled(sessions, workspace_id: int, pipeline_id: int, enabled: bool, now: datetime = NOW) -> None:
    with transaction(sessions) as session:
        set_pipeline_enabled(session, workspace_id=workspace_id, pipeline_id=pipeline_id, enabled=enabled, now=now)


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
    assert not trigger.enabled and trigger.disabled_reason == DEDUP_REASON
    assert trigger.next_fire_at is None
    assert (connector.periodic_indexing_enabled, connector.next_scheduled_at) == (False, None)


def test_a_disabled_user_pipeline_does_not_take_over(sessions):
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    with transaction(sessions) as session:
        create_pipeline(session, workspace_id=workspace_id, connector_id=connector_id, name="off", enabled=False)
    assert own_schedule(sessions, connector_id)[0].enabled


def test_the_schedule_returns_only_when_the_last_user_pipeline_lets_go(sessions):
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    first = user_pipeline(sessions, workspace_id, connector_id, "first")
    second = user_pipeline(sessions, workspace_id, connector_id, "second")
    set_enabled(sessions, workspace_id, first, False)
    assert not own_schedule(sessions, connector_id)[0].enabled
    later = NOW + timedelta(hours=2)
    with transaction(sessions) as session:
        delete_pipeline(session, workspace_id=workspace_id, pipeline_id=second, now=later)
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
            sa.select(PipelineTrigger)
            .join(Pipeline)
            .where(
                Pipeline.connector_id == connector_id,
                Pipeline.system_managed.is_(True),
                PipelineTrigger.kind == "schedule",
            )
        ).one()
        trigger.enabled, trigger.disabled_reason = False, "turned off by the operator"
    pipeline_id = user_pipeline(sessions, workspace_id, connector_id, "mine")
    set_enabled(sessions, workspace_id, pipeline_id, False)
    trigger, _ = own_schedule(sessions, connector_id)
    assert not trigger.enabled and trigger.disabled_reason == "turned off by the operator"


def assert_one_scheduler(sessions, connector_id: int) -> None:
    """The de-dup guard's invariant: the connector's own schedule is on exactly while no enabled user
    pipeline wraps the connector, and the connector says the same."""
    trigger, connector = own_schedule(sessions, connector_id)
    with sessions() as session:
        owners = session.scalar(
            sa.select(sa.func.count())
            .select_from(Pipeline)
            .where(Pipeline.connector_id == connector_id, Pipeline.system_managed.is_(False), Pipeline.enabled)
        )
    assert (trigger.enabled, trigger.next_fire_at is not None) == (owners == 0, owners == 0), owners
    assert (connector.periodic_indexing_enabled, connector.next_scheduled_at is not None) == (owners == 0, owners == 0)


def switch_at_once(sessions, workspace_id: int, states: dict[int, bool]) -> None:
    """Enable or disable each pipeline as `states` says, all at once: a thread and a transaction each."""
    barrier = threading.Barrier(len(states))
    errors: list[Exception] = []

    def switch(pipeline_id: int, enabled: bool) -> None:
        barrier.wait()
        try:
            set_enabled(sessions, workspace_id, pipeline_id, enabled)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=switch, args=pair) for pair in states.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_concurrent_enables_and_disables_over_one_connector_leave_exactly_one_scheduler(app_engine):
    sessions = session_factory(app_engine)
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    pipeline_ids = [user_pipeline(sessions, workspace_id, connector_id, f"p{n}") for n in range(8)]
    half = len(pipeline_ids) // 2
    rounds = [[False] * 8, [True] * 8, [False] * 8, [True] * half + [False] * half, [False] * half + [True] * half]
    for states in rounds * 2:
        switch_at_once(sessions, workspace_id, dict(zip(pipeline_ids, states, strict=True)))
        assert_one_scheduler(sessions, connector_id)


def test_a_connector_without_periodic_indexing_is_untouched(sessions):
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="u").workspace
        connector = create_connector(
            session, workspace_id=workspace.id, connector_type="webcrawler", urls=["https://example.com/"]
        )
        ids = workspace.id, connector.id
    pipeline_id = user_pipeline(sessions, *ids, "mine")
    set_enabled(sessions, ids[0], pipeline_id, False)
    with sessions() as session:
        assert (
            session.scalar(sa.select(sa.func.count()).select_from(Pipeline).where(Pipeline.connector_id == ids[1])) == 1
        )
        assert session.get(Connector, ids[1]).periodic_indexing_enabled is False


def test_a_pipeline_over_an_ineligible_connector_type_is_refused_and_nothing_is_written(sessions, monkeypatch):
    from pipelines_dagster.core.catalog import connector_types
    from pipelines_dagster.core.errors import InvalidInputError

    workspace_id, connector_id = connector_with_own_indexing(sessions)
    monkeypatch.setitem(connector_types.PIPELINE_AVAILABILITY, "webcrawler", connector_types.Availability.MIGRATING)
    with sessions() as session:
        before = session.scalar(
            sa.select(sa.func.count()).select_from(Pipeline).where(Pipeline.workspace_id == workspace_id)
        )
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
        assert (
            session.scalar(
                sa.select(sa.func.count()).select_from(Pipeline).where(Pipeline.workspace_id == workspace_id)
            )
            == before
        )


# Pipeline editing: the rules the CLI and the API share.


def snapshot(sessions, pipeline_id: int) -> dict:
    """What a pipeline says about itself, with its schedule's columns."""
    with sessions() as session:
        pipeline = session.get(Pipeline, pipeline_id)
        trigger = schedule_triggers(session, [pipeline_id]).get(pipeline_id)
        return {
            "name": pipeline.name,
            "save_to_kb": pipeline.save_to_kb,
            "enabled": pipeline.enabled,
            "folder_id": pipeline.destination_folder_id,
            "urls": initial_urls(pipeline),
            "retry": RetryPolicy.of(pipeline),
            "worker_queue": pipeline.worker_queue,
            "schedule": None if trigger is None else (ScheduleSpec.of(trigger), trigger.next_fire_at),
        }


def update(sessions, workspace_id: int, pipeline_id: int, now: datetime = NOW, **changes) -> None:
    with transaction(sessions) as session:
        update_pipeline(
            session,
            workspace_id=workspace_id,
            pipeline_id=pipeline_id,
            changes=PipelineChanges(**changes),
            now=now,
        )


def refused(sessions, workspace_id: int, pipeline_id: int, **changes) -> InvalidInputError:
    before = snapshot(sessions, pipeline_id)
    with pytest.raises(InvalidInputError) as caught:
        update(sessions, workspace_id, pipeline_id, **changes)
    assert snapshot(sessions, pipeline_id) == before
    return caught.value


@pytest.fixture
def workspace_and_connector(sessions) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="u").workspace
        connector = create_connector(
            session, workspace_id=workspace.id, connector_type="webcrawler", urls=["https://example.com/"]
        )
        return workspace.id, connector.id


def test_create_takes_a_folder_id_urls_a_schedule_and_a_retry_policy(sessions, workspace_and_connector):
    workspace_id, connector_id = workspace_and_connector
    policy = validate_retry_policy(backoff="linear", max_retries=5, delay_seconds=30)
    with transaction(sessions) as session:
        folder_id = get_or_create_folder(session, workspace_id=workspace_id, name="Docs").id
        pipeline_id = create_pipeline(
            session,
            workspace_id=workspace_id,
            connector_id=connector_id,
            name="docs",
            folder_id=folder_id,
            urls=["https://example.com/a", "https://example.com/a"],
            schedule=ScheduleSpec(every_minutes=15),
            retry=policy,
            now=NOW,
        ).id
    assert snapshot(sessions, pipeline_id) == {
        "name": "docs",
        "save_to_kb": True,
        "enabled": True,
        "folder_id": folder_id,
        "urls": ["https://example.com/a"],
        "retry": policy,
        "worker_queue": None,
        "schedule": (ScheduleSpec(every_minutes=15), NOW + timedelta(minutes=15)),
    }


def test_update_changes_only_what_is_given_and_none_clears(sessions, workspace_and_connector):
    workspace_id, connector_id = workspace_and_connector
    with transaction(sessions) as session:
        pipeline_id = create_pipeline(
            session,
            workspace_id=workspace_id,
            connector_id=connector_id,
            name="docs",
            folder_name="Docs",
            urls=["https://example.com/a"],
            schedule=ScheduleSpec(cron="0 6 * * *", timezone="UTC"),
            now=NOW,
        ).id
    created = snapshot(sessions, pipeline_id)
    update(sessions, workspace_id, pipeline_id, name="renamed")
    assert snapshot(sessions, pipeline_id) == {**created, "name": "renamed"}
    later = NOW + timedelta(days=3)
    # Re-saving the same schedule (spelled differently) keeps its next fire time; a new one moves it.
    update(sessions, workspace_id, pipeline_id, later, schedule=ScheduleSpec(cron="0  6 * * *", timezone="UTC"))
    assert snapshot(sessions, pipeline_id)["schedule"] == created["schedule"]
    update(
        sessions,
        workspace_id,
        pipeline_id,
        later,
        schedule=ScheduleSpec(every_minutes=10),
        retry=validate_retry_policy(max_retries=0),
    )
    changed = snapshot(sessions, pipeline_id)
    assert changed["schedule"] == (ScheduleSpec(every_minutes=10), later + timedelta(minutes=10))
    assert changed["retry"].max_retries == 0
    update(sessions, workspace_id, pipeline_id, folder=None, urls=None, schedule=None, save_to_kb=False)
    assert snapshot(sessions, pipeline_id) == {
        **changed,
        "folder_id": None,
        "urls": None,
        "schedule": None,
        "save_to_kb": False,
    }
    update(sessions, workspace_id, pipeline_id, folder="Docs")
    assert snapshot(sessions, pipeline_id)["folder_id"] == created["folder_id"]


def test_update_rules_refuse_with_the_field_and_write_nothing(sessions, workspace_and_connector):
    workspace_id, connector_id = workspace_and_connector
    with transaction(sessions) as session:
        other = create_workspace(session, name="globex", owner_user_id="v").workspace.id
        foreign_folder = get_or_create_folder(session, workspace_id=other, name="Theirs").id
        drive = Connector(workspace_id=workspace_id, name="drive", connector_type="google_drive")
        session.add(drive)
        session.flush()
        drive_id = drive.id
    first = user_pipeline(sessions, workspace_id, connector_id, "first")
    second = user_pipeline(sessions, workspace_id, connector_id, "second")
    on_drive = user_pipeline(sessions, workspace_id, drive_id, "drive")
    # Keeping one's own name is no clash.
    update(sessions, workspace_id, second, name="second")
    cases = [
        (second, {"name": "first", "folder": "New"}, "name"),
        (second, {"name": " "}, "name"),
        (second, {"folder": "Docs", "folder_id": None}, "folder_id"),
        (second, {"folder_id": foreign_folder}, "folder_id"),
        (second, {"urls": []}, "urls"),
        (on_drive, {"urls": ["https://example.com/"], "name": "renamed"}, "urls"),
        (second, {"schedule": ScheduleSpec(cron="0 6 * * *")}, "schedule.timezone"),
        (second, {"schedule": ScheduleSpec(cron="0 6 * * *", timezone="UTC", every_minutes=5)}, "schedule.cron"),
        (second, {"schedule": ScheduleSpec(every_minutes=0)}, "schedule.every_minutes"),
    ]
    for pipeline_id, changes, field in cases:
        assert refused(sessions, workspace_id, pipeline_id, **changes).field == field, changes
    with pytest.raises(NotFoundError):
        update(sessions, other, first, name="stolen")


def test_a_connector_of_another_workspace_is_invalid_input_on_connector_id(sessions, workspace_and_connector):
    _, connector_id = workspace_and_connector
    with transaction(sessions) as session:
        other = create_workspace(session, name="globex", owner_user_id="v").workspace.id
    with pytest.raises(InvalidInputError) as caught, transaction(sessions) as session:
        create_pipeline(session, workspace_id=other, connector_id=connector_id, name="steal")
    assert (caught.value.field, caught.value.message) == (
        "connector_id",
        f"connector {connector_id} is not in workspace {other}",
    )


def test_the_connectors_own_indexing_pipeline_is_refused_by_every_edit(sessions):
    workspace_id, connector_id = connector_with_own_indexing(sessions)
    system_id = own_schedule(sessions, connector_id)[0].pipeline_id
    before = snapshot(sessions, system_id)
    for edit in (
        lambda session: update_pipeline(
            session, workspace_id=workspace_id, pipeline_id=system_id, changes=PipelineChanges(name="mine")
        ),
        lambda session: set_pipeline_enabled(session, workspace_id=workspace_id, pipeline_id=system_id, enabled=False),
        lambda session: delete_pipeline(session, workspace_id=workspace_id, pipeline_id=system_id),
    ):
        with pytest.raises(SystemManagedError, match="periodic indexing"), transaction(sessions) as session:
            edit(session)
    assert snapshot(sessions, system_id) == before
