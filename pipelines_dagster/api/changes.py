"""A pipeline's page-change timeline: which pages were new, changed or removed, newest first, and one change."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import AwareDatetime

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.paging import Cursor, keyset_page
from pipelines_dagster.api.pipelines import PipelineId
from pipelines_dagster.api.schemas.changes import PageChangeOut, PageChangePage
from pipelines_dagster.api.schemas.common import InUtc, IsoText
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.kb.changes import MAX_LIMIT, ChangeStatus, get_change, list_changes
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}/pipelines", tags=["changes"])


@router.get("/{pipeline_id}/changes", responses=responses(401, 404, 422, 503))
def list_page_changes(
    workspace_id: WorkspaceId,
    pipeline_id: PipelineId,
    api: Api,
    status: Annotated[ChangeStatus | None, Query(description="Only changes of this kind.")] = None,
    since: Annotated[
        AwareDatetime | None,
        IsoText,
        InUtc,
        Query(description="Only changes observed at or after this time, with its UTC offset."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Changes per page.")] = 20,
    cursor: Cursor = None,
) -> PageChangePage:
    """The pipeline's page changes, newest first; a changed page carries a unified diff (capped at 64 KiB)."""
    with api.sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        rows, next_cursor = keyset_page(
            lambda before_id: list_changes(
                session,
                workspace_id=workspace_id,
                pipeline_id=pipeline_id,
                status=status,
                since=since,
                before_id=before_id,
                limit=limit,
            ),
            cursor,
        )
    return PageChangePage(
        changes=[PageChangeOut.model_validate(row, from_attributes=True) for row in rows], next_cursor=next_cursor
    )


@router.get("/{pipeline_id}/changes/{change_id}", responses=responses(401, 404, 422, 503))
def get_page_change(
    workspace_id: WorkspaceId,
    pipeline_id: PipelineId,
    change_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    api: Api,
) -> PageChangeOut:
    """One page change; a changed page's carries its unified diff. A pages.changed notification links here."""
    with api.sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        change = get_change(session, workspace_id=workspace_id, pipeline_id=pipeline_id, change_id=change_id)
    return PageChangeOut.model_validate(change, from_attributes=True)
