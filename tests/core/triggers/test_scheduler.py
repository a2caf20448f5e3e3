"""Claiming due schedule triggers: advance without catch-up, self-heal, disable invalid, SKIP LOCKED."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import Connector, Pipeline, PipelineTrigger, Workspace
from pipelines_dagster.core.triggers.fires import Budget
from pipelines_dagster.core.triggers.scheduler import claim_due, due_query, take_due
from tests.support.runs import every_run

NOW = datetime(2026, 12, 1, 9, 0, 30, tzinfo=UTC)


def pipelines_with_triggers(
    sessions, count: int, *, enabled: bool = True, uploads: bool = False, **trigger
) -> list[int]:
    """`count` pipelines over a web connector (none for `uploads`) in a new workspace, each with
    one schedule trigger; the trigger ids."""
    trigger = {"cron": "*/5 * * * *", "timezone": "UTC", "next_fire_at": NOW - timedelta(minutes=1)} | trigger
    with transaction(sessions) as session:
        workspace = Workspace(name="acme", owner_user_id="u")
        session.add(workspace)
        session.flush()
        connector = Connector(
            workspace_id=workspace.id,
            name="web",
            connector_type="webcrawler",
            config={"INITIAL_URLS": ["https://example.com/"]},
        )
        session.add(connector)
        session.flush()
        pipelines = [
            Pipeline(
                workspace_id=workspace.id, name=f"p{n}", enabled=enabled, connector_id=None if uploads else connector.id
            )
            for n in range(count)
        ]
        session.add_all(pipelines)
        session.flush()
        triggers = [
            PipelineTrigger(workspace_id=workspace.id, pipeline_id=p.id, kind="schedule", **trigger) for p in pipelines
        ]
        session.add_all(triggers)
        session.flush()
        return [t.id for t in triggers]


def trigger_row(sessions, trigger_id: int) -> PipelineTrigger:
    with sessions() as session:
        return session.get(PipelineTrigger, trigger_id)


def test_a_due_trigger_fires_once_and_advances_past_now(sessions):
    [trigger_id] = pipelines_with_triggers(sessions, 1, next_fire_at=NOW - timedelta(hours=3))
    fires = list(take_due(sessions, every_run(), now=NOW).fires)
    assert [f.trigger_id for f in fires] == [trigger_id]
    # Three hours late: one fire, no catch-up of the 35 missed ones.
    assert fires[0].scheduled_for == NOW - timedelta(hours=3)
    assert fires[0].run_key == f"schedule:{trigger_id}:{(NOW - timedelta(hours=3)).isoformat()}"
    row = trigger_row(sessions, trigger_id)
    assert row.next_fire_at == datetime(2026, 12, 1, 9, 5, tzinfo=UTC) and row.last_fired_at == NOW
    assert [f for f in take_due(sessions, every_run(), now=NOW).fires if f.trigger_id == trigger_id] == []


def test_cron_advances_in_the_triggers_timezone(sessions):
    [trigger_id] = pipelines_with_triggers(sessions, 1, cron="0 6 * * *", timezone="America/New_York")
    list(take_due(sessions, every_run(), now=NOW).fires)
    # 06:00 in New York in December is 11:00 UTC.
    assert trigger_row(sessions, trigger_id).next_fire_at == datetime(2026, 12, 1, 11, 0, tzinfo=UTC)


def test_interval_triggers_fire_every_n_minutes_from_their_due_time(sessions):
    [trigger_id] = pipelines_with_triggers(sessions, 1, cron=None, timezone=None, interval_minutes=15)
    assert [f.trigger_id for f in take_due(sessions, every_run(), now=NOW).fires] == [trigger_id]
    # Due a minute before the tick: the next fire is due + 15 min, not tick + 15 min (no drift).
    assert trigger_row(sessions, trigger_id).next_fire_at == NOW - timedelta(minutes=1) + timedelta(minutes=15)


def test_a_late_interval_tick_fires_once_and_keeps_the_phase(sessions):
    due = NOW - timedelta(minutes=50)
    [trigger_id] = pipelines_with_triggers(sessions, 1, cron=None, timezone=None, interval_minutes=15, next_fire_at=due)
    fires = [f for f in take_due(sessions, every_run(), now=NOW).fires if f.trigger_id == trigger_id]
    assert [f.scheduled_for for f in fires] == [due]
    # due + 15, + 30 and + 45 were missed and are skipped; due + 60 is the next on the phase.
    assert trigger_row(sessions, trigger_id).next_fire_at == due + timedelta(minutes=60)


def test_a_cron_in_the_repeated_hour_fires_once_on_the_fall_back_night(sessions):
    start = datetime(2026, 10, 24, 22, tzinfo=UTC)
    [trigger_id] = pipelines_with_triggers(
        sessions, 1, cron="30 2 * * *", timezone="Europe/Stockholm", next_fire_at=None
    )
    fired = []
    for minutes in range(0, 6 * 60, 5):  # a tick every five minutes through the night
        taken = take_due(sessions, every_run(), now=start + timedelta(minutes=minutes))
        fired += [f.scheduled_for for f in taken.fires if f.trigger_id == trigger_id]
    # 02:30 CEST (00:30 UTC) fired; 02:30 CET (01:30 UTC) is the same wall time again and did not.
    assert fired == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]
    assert trigger_row(sessions, trigger_id).next_fire_at == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


def test_a_missing_next_fire_time_is_healed_without_firing(sessions):
    [trigger_id] = pipelines_with_triggers(sessions, 1, next_fire_at=None)
    assert [f for f in take_due(sessions, every_run(), now=NOW).fires if f.trigger_id == trigger_id] == []
    assert trigger_row(sessions, trigger_id).next_fire_at == datetime(2026, 12, 1, 9, 5, tzinfo=UTC)


def test_an_invalid_schedule_disables_the_trigger_with_the_reason(sessions):
    [bad_cron] = pipelines_with_triggers(sessions, 1, cron="61 * * * *")
    [bad_zone] = pipelines_with_triggers(sessions, 1, timezone="Mars/Olympus")
    [healed_bad] = pipelines_with_triggers(sessions, 1, cron="not a cron", next_fire_at=None)
    # Stored before such schedules were refused: one that never fires, one in the server's own zone.
    [never] = pipelines_with_triggers(sessions, 1, cron="0 0 30 2 *")
    [server_zone] = pipelines_with_triggers(sessions, 1, timezone="localtime")
    fired = {f.trigger_id for f in take_due(sessions, every_run(), now=NOW).fires}
    assert fired.isdisjoint({bad_cron, bad_zone, healed_bad, never, server_zone})
    for trigger_id, reason in [
        (bad_cron, "invalid cron"),
        (bad_zone, "unknown timezone"),
        (healed_bad, "invalid cron"),
        (never, "never fires"),
        (server_zone, "unknown timezone 'localtime'"),
    ]:
        row = trigger_row(sessions, trigger_id)
        assert not row.enabled and row.next_fire_at is None
        assert row.disabled_reason.startswith("invalid schedule, trigger disabled") and reason in row.disabled_reason


def test_a_disabled_pipelines_trigger_is_advanced_and_counted_skipped_without_a_fire(sessions):
    take_due(sessions, every_run(), now=NOW)  # what other tests left due on a shared database
    [trigger_id] = pipelines_with_triggers(sessions, 1, enabled=False)
    [enabled] = pipelines_with_triggers(sessions, 1)
    taken = take_due(sessions, every_run(), now=NOW)
    assert [f.trigger_id for f in taken.fires] == [enabled]
    assert (taken.rows, taken.skipped) == (2, 1)
    assert trigger_row(sessions, trigger_id).next_fire_at > NOW


def test_a_pipeline_without_a_connector_is_never_claimed(sessions):
    [uploads] = pipelines_with_triggers(sessions, 1, uploads=True)
    [crawls] = pipelines_with_triggers(sessions, 1)
    fired = {fire.trigger_id for fire in take_due(sessions, every_run(), now=NOW).fires}
    assert crawls in fired and uploads not in fired
    # Left as it was: not advanced, not fired, not disabled.
    row = trigger_row(sessions, uploads)
    assert row.next_fire_at == NOW - timedelta(minutes=1) and row.last_fired_at is None and row.enabled


def test_claims_loop_over_batches_until_nothing_is_due(sessions):
    ids = pipelines_with_triggers(sessions, 7)
    fired = [
        f.trigger_id for f in take_due(sessions, every_run(), now=NOW, budget=Budget(batch_size=3, max_rows=None)).fires
    ]
    assert sorted(fired) == sorted(ids)


def test_a_row_locked_by_another_tick_is_skipped(postgres_engine):
    sessions = session_factory(postgres_engine)
    ids = set(pipelines_with_triggers(sessions, 6, next_fire_at=NOW - timedelta(days=400)))
    with sessions() as holder, holder.begin():
        held = {t.id for t, _ in holder.execute(due_query(now=NOW - timedelta(days=399), batch_size=3))}
        assert len(held) == 3 and held <= ids
        taken = claim_due(sessions, now=NOW - timedelta(days=399), limit=100)
        assert {f.trigger_id for f in taken.fires} == ids - held


def test_two_concurrent_ticks_claim_disjoint_rows(postgres_engine):
    sessions = session_factory(postgres_engine)
    moment = NOW - timedelta(days=300)
    ids = set(pipelines_with_triggers(sessions, 40, next_fire_at=moment - timedelta(minutes=1)))
    barrier = threading.Barrier(2)
    claimed: list[list[int]] = [[], []]

    def tick(slot: int) -> None:
        barrier.wait()
        for _ in range(20):
            taken = claim_due(sessions, now=moment, limit=5)
            claimed[slot].extend(f.trigger_id for f in taken.fires if f.trigger_id in ids)
            if taken.rows == 0:
                return

    threads = [threading.Thread(target=tick, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(claimed[0]).isdisjoint(claimed[1])
    assert sorted(claimed[0] + claimed[1]) == sorted(ids)
    with sessions() as session:
        assert (
            session.scalar(
                sa.select(sa.func.count())
                .select_from(PipelineTrigger)
                .where(PipelineTrigger.id.in_(ids), PipelineTrigger.last_fired_at == moment)
            )
            == 40
        )
