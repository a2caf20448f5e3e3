"""A pipeline's runs: run it now, its run history from Dagster, and a run's raw crawl result."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.responses import StreamingResponse

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.pipelines import PipelineId
from pipelines_dagster.api.schemas.runs import RunLaunched
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.errors import NotFoundError
from pipelines_dagster.core.storage.blob import JSONL_CONTENT_TYPE, BlobNotFoundError
from pipelines_dagster.history import PipelineRunDetail, RunPage, RunStatus
from pipelines_dagster.launch import launch_pipeline_run

router = APIRouter(prefix="/workspaces/{workspace_id}/pipelines", tags=["runs"])

RunId = Annotated[uuid.UUID, Path(description="A Dagster run id.")]


class JSONLinesResponse(StreamingResponse):
    media_type = JSONL_CONTENT_TYPE


def _require_pipeline(api: Api, workspace_id: int, pipeline_id: int) -> None:
    with api.sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)


def _pipeline_run(api: Api, workspace_id: int, pipeline_id: int, run_id: uuid.UUID) -> PipelineRunDetail:
    _require_pipeline(api, workspace_id, pipeline_id)
    run = api.history.get_run(workspace_id, str(run_id), pipeline_id=pipeline_id)
    if run is None or run.pipeline_id != pipeline_id:
        raise NotFoundError(f"pipeline {pipeline_id} has no run {run_id}")
    return run


@router.post(
    "/{pipeline_id}/run",
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        202: {
            "headers": {
                "Location": {
                    "description": "The run in this API (`url`): GET it to follow the run.",
                    "schema": {"type": "string"},
                }
            }
        },
        **responses(401, 404, 409, 422, 502, 503),
    },
)
def run_pipeline(workspace_id: WorkspaceId, pipeline_id: PipelineId, api: Api, response: Response) -> RunLaunched:
    """Launch the pipeline now (trigger `manual`); `Location` names the run, to follow it.

    A disabled or otherwise unrunnable pipeline, one without an enabled manual trigger, or one with a
    run queued or in progress (named in the answer) is refused with 409 and the reason; no run is created.
    """
    run_id = launch_pipeline_run(
        api.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id, launcher=api.launcher
    )
    launched = RunLaunched.of(workspace_id=workspace_id, pipeline_id=pipeline_id, run_id=run_id)
    response.headers["Location"] = launched.url
    return launched


@router.get("/{pipeline_id}/runs", responses=responses(401, 404, 422, 503))
def list_pipeline_runs(
    workspace_id: WorkspaceId,
    pipeline_id: PipelineId,
    api: Api,
    limit: Annotated[int, Query(ge=1, le=100, description="Runs per page.")] = 20,
    cursor: Annotated[
        str | None,
        Query(
            min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="`next_cursor` of the previous page."
        ),
    ] = None,
    status: Annotated[RunStatus | None, Query(description="Only runs in this status.")] = None,
) -> RunPage:
    """The pipeline's runs, newest first."""
    _require_pipeline(api, workspace_id, pipeline_id)
    return api.history.list_runs(workspace_id, pipeline_id=pipeline_id, status=status, limit=limit, cursor=cursor)


@router.get("/{pipeline_id}/runs/{run_id}", responses=responses(401, 404, 422, 503))
def get_pipeline_run(workspace_id: WorkspaceId, pipeline_id: PipelineId, run_id: RunId, api: Api) -> PipelineRunDetail:
    """One run with a summary per step."""
    return _pipeline_run(api, workspace_id, pipeline_id, run_id)


@router.get(
    "/{pipeline_id}/runs/{run_id}/result",
    response_class=JSONLinesResponse,
    responses={
        200: {
            "description": "The raw crawl result: one JSON object per URL, one per line.",
            "content": {JSONL_CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        **responses(401, 404, 422, 503, by_reference=True),
    },
)
def get_pipeline_run_result(
    workspace_id: WorkspaceId, pipeline_id: PipelineId, run_id: RunId, api: Api
) -> JSONLinesResponse:
    """Stream the run's crawl result from the blob store; 404 when the run kept none."""
    run = _pipeline_run(api, workspace_id, pipeline_id, run_id)
    if run.blob_key is None:
        raise NotFoundError(f"run {run_id} kept no crawl result; it stopped before crawling")
    try:
        chunks = api.blob_store.open_stream(run.blob_key)
    except BlobNotFoundError:
        raise NotFoundError(f"the crawl result of run {run_id} is no longer stored") from None
    return JSONLinesResponse(chunks)
