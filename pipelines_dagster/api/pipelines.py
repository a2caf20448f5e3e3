"""`/workspaces/{workspace_id}/pipelines`: list, create, read, change and delete a workspace's pipelines.

Each write is one transaction: input that fails any check leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Path, Response, status
from sqlalchemy.orm import Session

from pipelines_dagster import services
from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas import (
    MAX_ID,
    PipelineCreate,
    PipelineList,
    PipelineOut,
    PipelineUpdate,
    RetryPolicyOut,
    Schedule,
    ScheduleOut,
)
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, ConnectorType, Folder, Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.core import catalog
from pipelines_dagster.core.retry import RetryPolicy
from pipelines_dagster.core.validation import InvalidInputError

router = APIRouter(prefix="/workspaces/{workspace_id}/pipelines", tags=["pipelines"])

PipelineId = Annotated[int, Path(ge=1, le=MAX_ID, description="A pipeline of the workspace.")]
INITIAL_URLS = "INITIAL_URLS"


def schedule_triggers(session: Session, pipeline_ids: Iterable[int]) -> dict[int, PipelineTrigger]:
    rows = session.scalars(
        sa.select(PipelineTrigger).where(
            PipelineTrigger.pipeline_id.in_(list(pipeline_ids)),
            PipelineTrigger.kind == TriggerKind.SCHEDULE.value,
        )
    )
    return {trigger.pipeline_id: trigger for trigger in rows}


def pipeline_out(pipeline: Pipeline, trigger: PipelineTrigger | None) -> PipelineOut:
    return PipelineOut(
        id=pipeline.id,
        workspace_id=pipeline.workspace_id,
        connector_id=pipeline.connector_id,
        name=pipeline.name,
        save_to_kb=pipeline.save_to_kb,
        folder_id=pipeline.destination_folder_id,
        enabled=pipeline.enabled,
        system_managed=pipeline.system_managed,
        urls=pipeline.config.get(INITIAL_URLS),
        schedule=None
        if trigger is None
        else ScheduleOut(
            cron=trigger.cron,
            timezone=trigger.timezone,
            every_minutes=trigger.interval_minutes,
            enabled=trigger.enabled,
            next_fire_at=trigger.next_fire_at,
            disabled_reason=trigger.disabled_reason,
        ),
        retry_policy=retry_policy_out(RetryPolicy.of(pipeline)),
        created_at=pipeline.created_at,
        updated_at=pipeline.updated_at,
    )


def retry_policy_out(policy: RetryPolicy) -> RetryPolicyOut:
    return RetryPolicyOut(
        backoff=policy.backoff.value, max_retries=policy.max_retries, delay_seconds=policy.delay_seconds,
        description=policy.describe(),
    )


def _read(session: Session, pipeline: Pipeline) -> PipelineOut:
    session.flush()
    session.refresh(pipeline)
    return pipeline_out(pipeline, schedule_triggers(session, [pipeline.id]).get(pipeline.id))


def _schedule_spec(schedule: Schedule) -> catalog.ScheduleSpec:
    """The catalog's rules for a schedule as a whole, reported under the request's `schedule` field."""
    try:
        return catalog.ScheduleSpec(
            cron=schedule.cron, timezone=schedule.timezone, every_minutes=schedule.every_minutes
        ).validated()
    except InvalidInputError as exc:
        raise InvalidInputError(f"schedule.{exc.field}", exc.message) from None


def _connector(session: Session, workspace_id: int, connector_id: int) -> Connector:
    connector = session.get(Connector, connector_id)
    if connector is None or connector.workspace_id != workspace_id:
        raise InvalidInputError("connector_id", f"workspace {workspace_id} has no connector {connector_id}")
    return connector


def _folder_id(session: Session, workspace_id: int, folder_id: int) -> int:
    folder = session.get(Folder, folder_id)
    if folder is None or folder.workspace_id != workspace_id:
        raise InvalidInputError("folder_id", f"workspace {workspace_id} has no folder {folder_id}")
    return folder.id


def _one_folder(given: set[str]) -> None:
    if {"folder", "folder_id"} <= given:
        raise InvalidInputError("folder_id", "give folder (a name) or folder_id, not both")


def _check_urls_fit(connector: Connector | None, urls: list[str] | None) -> None:
    if urls is not None and (connector is None or connector.connector_type != ConnectorType.WEBCRAWLER.value):
        kind = connector.connector_type if connector else "uploads"
        raise InvalidInputError("urls", f"a {kind} pipeline crawls no URLs; leave urls out")


def _editable(session: Session, workspace_id: int, pipeline_id: int) -> Pipeline:
    pipeline = catalog.get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    if pipeline.system_managed:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail=f"pipeline {pipeline_id} is connector {pipeline.connector_id}'s own periodic indexing; "
            "it follows the connector and cannot be changed or deleted here",
        )
    return pipeline


def _rename(session: Session, pipeline: Pipeline, name: str) -> None:
    taken = session.scalar(
        sa.select(Pipeline.id).where(
            Pipeline.workspace_id == pipeline.workspace_id, Pipeline.name == name, Pipeline.id != pipeline.id
        )
    )
    if taken:
        raise InvalidInputError("name", f"workspace {pipeline.workspace_id} already has a pipeline named {name!r}")
    pipeline.name = name


def _set_schedule(session: Session, pipeline: Pipeline, spec: catalog.ScheduleSpec | None, now: datetime) -> None:
    trigger = schedule_triggers(session, [pipeline.id]).get(pipeline.id)
    if spec is None:
        if trigger is not None:
            session.delete(trigger)
        return
    if trigger is None:
        session.add(
            PipelineTrigger(
                workspace_id=pipeline.workspace_id,
                pipeline_id=pipeline.id,
                kind=TriggerKind.SCHEDULE.value,
                cron=spec.cron,
                timezone=spec.timezone,
                interval_minutes=spec.every_minutes,
                next_fire_at=spec.next_fire_after(now),
            )
        )
        return
    if (trigger.cron, trigger.timezone, trigger.interval_minutes) != (spec.cron, spec.timezone, spec.every_minutes):
        trigger.cron, trigger.timezone, trigger.interval_minutes = spec.cron, spec.timezone, spec.every_minutes
        # The old next fire time belongs to the old schedule; a switched-off trigger keeps none.
        trigger.next_fire_at = spec.next_fire_after(now) if trigger.enabled else None


@router.get("", responses=responses(401, 404, 422, 503))
def list_pipelines(workspace_id: WorkspaceId, api: Api) -> PipelineList:
    """The workspace's pipelines, including connectors' own periodic indexing (`system_managed`)."""
    with api.sessions() as session:
        pipelines = session.scalars(
            sa.select(Pipeline).where(Pipeline.workspace_id == workspace_id).order_by(Pipeline.id)
        ).all()
        triggers = schedule_triggers(session, [pipeline.id for pipeline in pipelines])
        return PipelineList(pipelines=[pipeline_out(p, triggers.get(p.id)) for p in pipelines])


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(401, 404, 422, 503))
def create_pipeline(workspace_id: WorkspaceId, body: PipelineCreate, api: Api) -> PipelineOut:
    """Create a pipeline over a connector of the workspace; its Dagster partition is registered with it."""
    _one_folder(body.model_fields_set)
    spec = _schedule_spec(body.schedule) if body.schedule is not None else None
    retry = body.retry_policy.policy() if body.retry_policy is not None else None
    with transaction(api.sessions) as session:
        connector = _connector(session, workspace_id, body.connector_id)
        _check_urls_fit(connector, body.urls)
        folder_id = _folder_id(session, workspace_id, body.folder_id) if body.folder_id is not None else None
        pipeline = services.create_pipeline(
            session,
            api.instance,
            workspace_id=workspace_id,
            connector_id=connector.id,
            name=body.name,
            save_to_kb=body.save_to_kb,
            folder_name=body.folder,
            schedule=spec,
            enabled=body.enabled,
            retry=retry,
        )
        if folder_id is not None:
            pipeline.destination_folder_id = folder_id
        if body.urls is not None:
            pipeline.config = {**pipeline.config, INITIAL_URLS: body.urls}
        return _read(session, pipeline)


@router.get("/{pipeline_id}", responses=responses(401, 404, 422, 503))
def get_pipeline(workspace_id: WorkspaceId, pipeline_id: PipelineId, api: Api) -> PipelineOut:
    """One pipeline of the workspace."""
    with api.sessions() as session:
        pipeline = catalog.get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        return pipeline_out(pipeline, schedule_triggers(session, [pipeline.id]).get(pipeline.id))


@router.put("/{pipeline_id}", responses=responses(401, 404, 409, 422, 503))
def update_pipeline(workspace_id: WorkspaceId, pipeline_id: PipelineId, body: PipelineUpdate, api: Api) -> PipelineOut:
    """Change the fields given, leave the rest.

    Enabling or disabling runs the de-dup guard (the connector's own periodic
    indexing is off while an enabled pipeline owns the connector); a changed
    schedule gets a new next fire time.
    """
    given = body.model_fields_set
    _one_folder(given)
    spec = _schedule_spec(body.schedule) if body.schedule is not None else None
    now = datetime.now(UTC)
    with transaction(api.sessions) as session:
        pipeline = _editable(session, workspace_id, pipeline_id)
        if body.name is not None:
            _rename(session, pipeline, body.name)
        if body.save_to_kb is not None:
            pipeline.save_to_kb = body.save_to_kb
        if "folder" in given:
            pipeline.destination_folder_id = (
                catalog.get_or_create_folder(session, workspace_id=workspace_id, name=body.folder).id
                if body.folder is not None
                else None
            )
        if "folder_id" in given:
            pipeline.destination_folder_id = (
                _folder_id(session, workspace_id, body.folder_id) if body.folder_id is not None else None
            )
        if "urls" in given:
            _check_urls_fit(pipeline.connector, body.urls)
            config = {key: value for key, value in pipeline.config.items() if key != INITIAL_URLS}
            pipeline.config = {**config, INITIAL_URLS: body.urls} if body.urls is not None else config
        if "schedule" in given:
            _set_schedule(session, pipeline, spec, now)
        if body.retry_policy is not None:
            body.retry_policy.policy().apply_to(pipeline)
        if body.enabled is not None:
            catalog.set_pipeline_enabled(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, enabled=body.enabled, now=now
            )
        return _read(session, pipeline)


@router.delete("/{pipeline_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(401, 404, 409, 422, 503))
def delete_pipeline(workspace_id: WorkspaceId, pipeline_id: PipelineId, api: Api) -> Response:
    """Delete a pipeline, its triggers and its Dagster partition; its run history stays in Dagster."""
    with transaction(api.sessions) as session:
        _editable(session, workspace_id, pipeline_id)
        services.delete_pipeline(session, api.instance, workspace_id=workspace_id, pipeline_id=pipeline_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
