"""Built-in pipeline templates in the app database: seeding, reseeding after a user's changes, turning
one on, and triggers of a disabled template firing into nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, Folder, Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.core.catalog.connectors import create_connector, initial_urls
from pipelines_dagster.core.catalog.pipelines import (
    PipelineChanges,
    SystemManagedError,
    create_pipeline,
    delete_pipeline,
    set_pipeline_enabled,
    update_pipeline,
)
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.catalog.seeding import SCHEDULE_OFF_REASON, seed_templates
from pipelines_dagster.core.catalog.templates import BY_KEY, TEMPLATES, disabled_reason, template_of
from pipelines_dagster.core.catalog.triggers import (
    USER_DISABLED_REASON,
    create_webhook_trigger,
    pipeline_triggers,
    set_trigger_enabled,
)
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.crawl.site.config import SITE_KEY, SiteConfig
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.core.triggers.fires import Taken
from pipelines_dagster.core.triggers.queue import take_events
from pipelines_dagster.core.triggers.scheduler import claim_due
from tests.support.db import row_counts
from tests.support.runs import KnownRuns

pytestmark = pytest.mark.integration


def new_workspace(sessions, name: str = "Acme") -> int:
    with transaction(sessions) as session:
        return create_workspace(session, name=name, owner_user_id="user-1").workspace.id


def seed(sessions, workspace_id: int):
    with transaction(sessions) as session:
        return seed_templates(session, workspace_id)


def templates_of(sessions, workspace_id: int) -> dict[str, Pipeline]:
    with sessions() as session:
        pipelines = session.scalars(sa.select(Pipeline).where(Pipeline.workspace_id == workspace_id)).all()
        return {template.key: pipeline for pipeline in pipelines if (template := template_of(pipeline))}


def triggers_of(sessions, pipeline_id: int) -> list[tuple[str, str | None, bool, str | None]]:
    with sessions() as session:
        rows = session.scalars(
            sa.select(PipelineTrigger).where(PipelineTrigger.pipeline_id == pipeline_id).order_by(PipelineTrigger.id)
        )
        return [(row.kind, row.event_type, row.enabled, row.disabled_reason) for row in rows]


def test_a_workspace_gets_every_template_disabled_its_manual_and_event_triggers_on_and_its_schedule_off(sessions):
    workspace_id = new_workspace(sessions)
    report = seed(sessions, workspace_id)

    seeded = templates_of(sessions, workspace_id)
    assert sorted(report.created) == sorted(pipeline.id for pipeline in seeded.values()) and report.kept == []
    assert set(seeded) == {template.key for template in TEMPLATES} and len(TEMPLATES) >= 4
    # A 10,000-page sync gets five hours a run, under its six-hourly cron.
    assert seeded["site_sync"].max_runtime_seconds == 5 * 3600
    for key, pipeline in seeded.items():
        template = BY_KEY[key]
        assert not pipeline.enabled and pipeline.connector_id is None and not pipeline.system_managed
        assert (pipeline.name, pipeline.save_to_kb) == (template.name, template.save_to_kb)
        assert RetryPolicy.of(pipeline) == template.retry
        assert pipeline.max_runtime_seconds == template.max_runtime_seconds
        assert "built-in template" in disabled_reason(pipeline)
        expected = [
            ("manual", None, True, None),
            *(("event", event.value, True, None) for event in template.events),
            ("schedule", None, False, SCHEDULE_OFF_REASON),
        ]
        assert triggers_of(sessions, pipeline.id) == expected
        with sessions() as session:
            folder = session.get(Folder, pipeline.destination_folder_id) if pipeline.destination_folder_id else None
            assert (folder.name if folder else None) == template.folder
            schedule = session.scalar(
                sa.select(PipelineTrigger).where(
                    PipelineTrigger.pipeline_id == pipeline.id, PipelineTrigger.kind == TriggerKind.SCHEDULE.value
                )
            )
            assert ScheduleSpec.of(schedule) == template.schedule and schedule.next_fire_at is None
    # A raw-crawl template and a KB one, a list crawl and a site crawl: the catalog covers each.
    assert {template.save_to_kb for template in TEMPLATES} == {True, False}
    assert {template.mode for template in TEMPLATES} == {"list", "site"}


def test_seeding_an_existing_workspace_adds_the_templates_beside_its_own_pipelines(sessions):
    workspace_id = new_workspace(sessions)
    with transaction(sessions) as session:
        own = create_pipeline(session, workspace_id=workspace_id, connector_id=None, name="Site sync").id
    report = seed(sessions, workspace_id)

    seeded = templates_of(sessions, workspace_id)
    assert len(report.created) == len(TEMPLATES)
    # The user's pipeline keeps its name; the template takes the next free one.
    assert seeded["site_sync"].name == "Site sync (2)"
    with sessions() as session:
        assert session.get(Pipeline, own).name == "Site sync" and template_of(session.get(Pipeline, own)) is None
    other = new_workspace(sessions, "Other")
    assert templates_of(sessions, other) == {}


def test_reseeding_keeps_enabled_flags_and_trigger_rows_the_user_changed(sessions):
    workspace_id = new_workspace(sessions)
    seed(sessions, workspace_id)
    seeded = templates_of(sessions, workspace_id)
    watch, faq, audit = seeded["change_watch"], seeded["faq_refresh"], seeded["weekly_link_audit"]
    with transaction(sessions) as session:
        # Turned on: given URLs (its own connector) and enabled, its schedule opted into.
        update_pipeline(
            session,
            workspace_id=workspace_id,
            pipeline_id=watch.id,
            changes=PipelineChanges(urls=["https://example.com/pricing"], enabled=True),
        )
        [watch_schedule] = [
            t
            for t in pipeline_triggers(session, workspace_id=workspace_id, pipeline_id=watch.id)
            if t.kind == "schedule"
        ]
        set_trigger_enabled(
            session, workspace_id=workspace_id, pipeline_id=watch.id, trigger_id=watch_schedule.id, enabled=True
        )
        # Triggers of another: one event trigger switched off, the manual one deleted, a webhook added.
        faq_triggers = pipeline_triggers(session, workspace_id=workspace_id, pipeline_id=faq.id)
        [manual] = [t for t in faq_triggers if t.kind == "manual"]
        first_event = next(t for t in faq_triggers if t.kind == "event")
        set_trigger_enabled(
            session, workspace_id=workspace_id, pipeline_id=faq.id, trigger_id=first_event.id, enabled=False
        )
        session.delete(manual)
        create_webhook_trigger(session, workspace_id=workspace_id, pipeline_id=faq.id, signing="standard")
        # And one deleted outright.
        delete_pipeline(session, workspace_id=workspace_id, pipeline_id=audit.id)
    before = {key: triggers_of(sessions, pipeline.id) for key, pipeline in templates_of(sessions, workspace_id).items()}
    with sessions() as session:
        watch_next = session.get(PipelineTrigger, watch_schedule.id).next_fire_at

    report = seed(sessions, workspace_id)

    after = templates_of(sessions, workspace_id)
    # What the workspace lacked comes back as shipped; the rest is as the user left it.
    assert report.created == [after["weekly_link_audit"].id] and after["weekly_link_audit"].id != audit.id
    assert sorted(report.kept) == sorted(pipeline.id for key, pipeline in after.items() if key != "weekly_link_audit")
    assert {key: triggers_of(sessions, after[key].id) for key in before} == before
    assert after["change_watch"].enabled and after["change_watch"].connector_id is not None
    assert not after["faq_refresh"].enabled
    assert [kind for kind, *_ in before["faq_refresh"]].count("manual") == 0
    assert ("event", first_event.event_type, False, USER_DISABLED_REASON) in before["faq_refresh"]
    with sessions() as session:
        assert session.get(PipelineTrigger, watch_schedule.id).next_fire_at == watch_next
    assert seed(sessions, workspace_id).created == []


def test_a_template_is_turned_on_by_urls_or_a_connector_and_refused_without_either(sessions):
    workspace_id = new_workspace(sessions)
    seed(sessions, workspace_id)
    seeded = templates_of(sessions, workspace_id)
    before = row_counts(sessions.kw["bind"])
    with pytest.raises(InvalidInputError) as refused, transaction(sessions) as session:
        set_pipeline_enabled(session, workspace_id=workspace_id, pipeline_id=seeded["docs_nightly"].id, enabled=True)
    assert refused.value.field == "enabled" and "give it a connector_id or urls" in refused.value.message
    assert row_counts(sessions.kw["bind"]) == before

    with transaction(sessions) as session:
        # A site template given start URLs crawls the site from them, within the template's bounds.
        docs = update_pipeline(
            session,
            workspace_id=workspace_id,
            pipeline_id=seeded["docs_nightly"].id,
            changes=PipelineChanges(urls=["https://docs.example.com/"], enabled=True),
        )
        connector = session.get(Connector, docs.connector_id)
        site = SiteConfig.read(connector.config[SITE_KEY])
        assert (site.start_urls, site.max_depth, site.max_pages) == (("https://docs.example.com/",), 3, 2000)
        assert docs.enabled and initial_urls(docs) is None and disabled_reason(docs) is None
        # A list template given a workspace connector crawls it.
        other = create_connector(
            session, workspace_id=workspace_id, connector_type="webcrawler", urls=["https://example.com/faq"]
        )
        faq = update_pipeline(
            session,
            workspace_id=workspace_id,
            pipeline_id=seeded["faq_refresh"].id,
            changes=PipelineChanges(connector_id=other.id, enabled=True),
        )
        assert (faq.connector_id, faq.enabled) == (other.id, True)
    with pytest.raises(InvalidInputError) as bad, transaction(sessions) as session:
        update_pipeline(
            session,
            workspace_id=workspace_id,
            pipeline_id=seeded["site_sync"].id,
            changes=PipelineChanges(urls=["ftp://example.com/"]),
        )
    assert bad.value.field == "urls"


def drained(take: Callable[[], Taken]) -> Taken:
    """Everything `take` claims until it claims nothing more."""
    taken = take()
    while (more := take()).rows:
        taken.add(more)
    return taken


def test_a_disabled_templates_triggers_fire_into_nothing(sessions):
    workspace_id = new_workspace(sessions)
    seed(sessions, workspace_id)
    docs = templates_of(sessions, workspace_id)["docs_nightly"]
    now = datetime.now(UTC)
    with transaction(sessions) as session:
        # Given its start URLs, its schedule opted into, and the template itself left off.
        update_pipeline(
            session,
            workspace_id=workspace_id,
            pipeline_id=docs.id,
            changes=PipelineChanges(urls=["https://docs.example.com/"]),
        )
        [schedule] = [
            t
            for t in pipeline_triggers(session, workspace_id=workspace_id, pipeline_id=docs.id)
            if t.kind == "schedule"
        ]
        set_trigger_enabled(
            session, workspace_id=workspace_id, pipeline_id=docs.id, trigger_id=schedule.id, enabled=True, now=now
        )
        assert schedule.next_fire_at == BY_KEY["docs_nightly"].schedule.next_fire_after(now)
        schedule.next_fire_at = now - timedelta(seconds=5)
        emit_event(session, workspace_id=workspace_id, event_type="refresh.requested")

    # Every row due, so that what earlier tests left in a shared database is taken too; then ours.
    due, events = (
        drained(lambda: claim_due(sessions, limit=100, now=now)),
        drained(lambda: take_events(sessions, KnownRuns(), now=now)),
    )
    due_fires = [fire for fire in due.fires if fire.workspace_id == workspace_id]
    assert due_fires == [] and docs.id in due.disabled_pipelines
    events.fires = [fire for fire in events.fires if fire.workspace_id == workspace_id]
    events.disabled_pipelines &= {pipeline.id for pipeline in templates_of(sessions, workspace_id).values()}
    # Every template subscribed to refresh.requested is disabled: the event fires none of them.
    refreshed = {
        pipeline.id
        for key, pipeline in templates_of(sessions, workspace_id).items()
        if "refresh.requested" in BY_KEY[key].events
    }
    assert events.fires == [] and events.disabled_pipelines == refreshed and docs.id in refreshed


def test_a_connectors_own_schedule_is_not_switched_by_hand(sessions):
    workspace_id = new_workspace(sessions)
    with transaction(sessions) as session:
        connector = create_connector(
            session,
            workspace_id=workspace_id,
            connector_type="webcrawler",
            urls=["https://example.com/"],
            index_every_minutes=60,
        )
        system = session.scalar(sa.select(Pipeline).where(Pipeline.connector_id == connector.id))
        triggers = pipeline_triggers(session, workspace_id=workspace_id, pipeline_id=system.id)
        [trigger] = [t for t in triggers if t.kind == "schedule"]
        ids = (system.id, trigger.id)
    with pytest.raises(SystemManagedError), transaction(sessions) as session:
        set_trigger_enabled(session, workspace_id=workspace_id, pipeline_id=ids[0], trigger_id=ids[1], enabled=False)
    with sessions() as session:
        assert session.get(PipelineTrigger, ids[1]).enabled
