"""The guards of a run started by hand: the run's own, then an enabled manual trigger, which every pipeline
is made with; a launch from the Dagster UI checks only the run's own."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.pipelines import create_pipeline, set_pipeline_enabled
from pipelines_dagster.core.catalog.seeding import seed_templates
from pipelines_dagster.core.catalog.triggers import create_manual_trigger, set_trigger_enabled
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.run.plan import RunRefused, plan_manual_run, plan_run


def manual_triggers(sessions, pipeline_id: int) -> list[tuple[int, bool]]:
    with sessions() as session:
        rows = session.execute(
            sa.select(PipelineTrigger.id, PipelineTrigger.enabled).where(
                PipelineTrigger.pipeline_id == pipeline_id, PipelineTrigger.kind == "manual"
            )
        )
        return [tuple(row) for row in rows]


@pytest.fixture
def made(sessions) -> tuple[int, int, int]:
    """(workspace, user pipeline, the connector's own indexing pipeline), each made as the CLI and API make them."""
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="u").workspace
        connector = create_connector(
            session,
            workspace_id=workspace.id,
            connector_type="webcrawler",
            urls=["https://example.com/"],
            index_every_minutes=60,
        )
        pipeline = create_pipeline(session, workspace_id=workspace.id, connector_id=connector.id, name="p")
        system = session.scalar(
            sa.select(Pipeline.id).where(Pipeline.connector_id == connector.id, Pipeline.system_managed.is_(True))
        )
        return workspace.id, pipeline.id, system


def test_every_pipeline_is_made_with_one_manual_trigger_on_and_may_be_run_by_hand(sessions, made):
    workspace_id, pipeline_id, system_id = made
    with transaction(sessions) as session:
        templates = seed_templates(session, workspace_id).created
    for one in (pipeline_id, system_id, *templates):
        [(_, enabled)] = manual_triggers(sessions, one)
        assert enabled, one
    with sessions() as session:
        assert plan_manual_run(session, pipeline_id) == plan_run(session, pipeline_id, keyring=None)
        assert plan_manual_run(session, system_id).pipeline_id == system_id


def test_a_manual_trigger_switched_off_refuses_run_now_but_not_the_crawl_step(sessions, made):
    workspace_id, pipeline_id, _ = made
    [(trigger_id, _)] = manual_triggers(sessions, pipeline_id)
    with transaction(sessions) as session:
        set_trigger_enabled(
            session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id, enabled=False
        )
    with sessions() as session, pytest.raises(RunRefused) as refused:
        plan_manual_run(session, pipeline_id)
    assert str(refused.value) == (
        f"pipeline {pipeline_id} has no enabled manual trigger (trigger {trigger_id} is off), so it cannot be run "
        f"by hand; enable it with `pipelines-dagster trigger enable --workspace {workspace_id} --pipeline "
        f"{pipeline_id} --trigger {trigger_id}` (API: POST .../triggers/{trigger_id}/enable)"
    )
    # What a Dagster UI launch's crawl step asks: an operator may run the partition.
    with sessions() as session:
        assert plan_run(session, pipeline_id, keyring=None).pipeline_id == pipeline_id
    with transaction(sessions) as session:
        set_trigger_enabled(
            session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id, enabled=True
        )
    with sessions() as session:
        assert plan_manual_run(session, pipeline_id).pipeline_id == pipeline_id


def test_a_disabled_pipeline_is_refused_for_being_disabled_whatever_its_manual_trigger(sessions, made):
    workspace_id, pipeline_id, _ = made
    with transaction(sessions) as session:
        set_pipeline_enabled(session, workspace_id=workspace_id, pipeline_id=pipeline_id, enabled=False)
    with sessions() as session, pytest.raises(RunRefused, match=f"pipeline {pipeline_id} is disabled; enable it"):
        plan_manual_run(session, pipeline_id)


def test_a_pipeline_without_a_manual_trigger_is_refused_until_it_is_given_one(sessions, made):
    workspace_id, pipeline_id, _ = made
    [(trigger_id, _)] = manual_triggers(sessions, pipeline_id)
    with transaction(sessions) as session:
        session.delete(session.get(PipelineTrigger, trigger_id))
    with sessions() as session, pytest.raises(RunRefused) as refused:
        plan_manual_run(session, pipeline_id)
    assert str(refused.value).startswith(
        f"pipeline {pipeline_id} has no manual trigger, so it cannot be run by hand; add one with "
        f"`pipelines-dagster trigger create --workspace {workspace_id} --pipeline {pipeline_id} --kind manual`"
    )
    with transaction(sessions) as session:
        create_manual_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    with pytest.raises(InvalidInputError, match="already has a manual trigger"), transaction(sessions) as session:
        create_manual_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    [(_, enabled)] = manual_triggers(sessions, pipeline_id)
    with sessions() as session:
        assert enabled and plan_manual_run(session, pipeline_id).pipeline_id == pipeline_id
