"""`/workspaces/{workspace_id}/pipelines`: list, create, read, change and delete a workspace's pipelines.

Each write is one transaction: input that fails any check leaves nothing behind. The rules are
the catalog's; a route parses the body, calls it and renders the pipeline.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from sqlalchemy.orm import Session

from pipelines_dagster import services
from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas.pipelines import (
    PipelineCreate,
    PipelineList,
    PipelineOut,
    PipelineReplace,
    PipelineUpdate,
)
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.core.catalog import pipelines as catalog
from pipelines_dagster.core.catalog.pipelines import PipelineChanges
from pipelines_dagster.core.catalog.schedules import schedule_triggers
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}/pipelines", tags=["pipelines"])

PipelineId = Annotated[int, Path(ge=1, le=MAX_ID, description="A pipeline of the workspace.")]


def _read(session: Session, pipeline: Pipeline) -> PipelineOut:
    session.flush()
    # Timestamps and server defaults are the database's.
    session.refresh(pipeline)
    return PipelineOut.of(pipeline, schedule_triggers(session, [pipeline.id]).get(pipeline.id))


@router.get("", responses=responses(401, 404, 422, 503))
def list_pipelines(workspace_id: WorkspaceId, api: Api) -> PipelineList:
    """The workspace's pipelines, including connectors' own periodic indexing (`system_managed`)."""
    with api.sessions() as session:
        pipelines = catalog.list_pipelines(session, workspace_id=workspace_id)
        return PipelineList.of(pipelines, schedule_triggers(session, [p.id for p in pipelines]))


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(401, 404, 422, 503))
def create_pipeline(workspace_id: WorkspaceId, body: PipelineCreate, api: Api) -> PipelineOut:
    """Create a pipeline over a connector of the workspace; its Dagster partition is registered with it."""
    with transaction(api.sessions) as session:
        pipeline = services.create_pipeline(
            session,
            api.instance,
            workspace_id=workspace_id,
            connector_id=body.connector_id,
            name=body.name,
            save_to_kb=body.save_to_kb,
            folder_name=body.folder,
            folder_id=body.folder_id,
            urls=body.urls,
            schedule=body.schedule.spec() if body.schedule is not None else None,
            enabled=body.enabled,
            retry=body.retry_policy.policy() if body.retry_policy is not None else None,
            max_runtime_seconds=body.max_runtime_seconds,
            worker_queue=body.worker_queue,
        )
        return _read(session, pipeline)


@router.get("/{pipeline_id}", responses=responses(401, 404, 422, 503))
def get_pipeline(workspace_id: WorkspaceId, pipeline_id: PipelineId, api: Api) -> PipelineOut:
    """One pipeline of the workspace."""
    with api.sessions() as session:
        pipeline = catalog.get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        return PipelineOut.of(pipeline, schedule_triggers(session, [pipeline.id]).get(pipeline.id))


def _changed(api: Api, workspace_id: int, pipeline_id: int, changes: PipelineChanges) -> PipelineOut:
    with transaction(api.sessions) as session:
        pipeline = services.update_pipeline(
            session, api.instance, workspace_id=workspace_id, pipeline_id=pipeline_id, changes=changes
        )
        return _read(session, pipeline)


@router.patch("/{pipeline_id}", responses=responses(401, 404, 409, 422, 503))
def update_pipeline(workspace_id: WorkspaceId, pipeline_id: PipelineId, body: PipelineUpdate, api: Api) -> PipelineOut:
    """Change the fields given, leave the rest.

    Enabling or disabling runs the de-dup guard (the connector's own periodic
    indexing is off while an enabled pipeline owns the connector); a changed
    schedule gets a new next fire time.
    """
    return _changed(api, workspace_id, pipeline_id, body.changes())


@router.put("/{pipeline_id}", responses=responses(401, 404, 409, 422, 503))
def replace_pipeline(
    workspace_id: WorkspaceId, pipeline_id: PipelineId, body: PipelineReplace, api: Api
) -> PipelineOut:
    """Replace the pipeline with the one given: every field is required (a missing one is a 422 naming it).

    The same rules as PATCH apply to each field; PATCH changes only some.
    """
    return _changed(api, workspace_id, pipeline_id, body.changes())


@router.delete("/{pipeline_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(401, 404, 409, 422, 503))
def delete_pipeline(workspace_id: WorkspaceId, pipeline_id: PipelineId, api: Api) -> Response:
    """Delete a pipeline, its triggers and its Dagster partition; its run history stays in Dagster."""
    with transaction(api.sessions) as session:
        services.delete_pipeline(session, api.instance, workspace_id=workspace_id, pipeline_id=pipeline_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
