"""A pipeline's KB documents: what it indexed, what failed, and what was archived because its page left the crawl;
and one document with the page's markdown."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.paging import Cursor, keyset_page
from pipelines_dagster.api.pipelines import PipelineId
from pipelines_dagster.api.schemas.documents import DocumentPage
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.kb.documents import (
    MAX_LIMIT,
    DocumentContent,
    DocumentListState,
    get_document,
    list_documents,
)
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}/pipelines", tags=["documents"])


@router.get("/{pipeline_id}/documents", responses=responses(401, 404, 422, 503))
def list_pipeline_documents(
    workspace_id: WorkspaceId,
    pipeline_id: PipelineId,
    api: Api,
    state: Annotated[
        DocumentListState | None,
        Query(description="Only documents in this state; `archived` ones are not counted in the others."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Documents per page.")] = 20,
    cursor: Cursor = None,
) -> DocumentPage:
    """The pipeline's documents, newest first, without their content; an archived one names the run that archived it."""
    with api.sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        rows, next_cursor = keyset_page(
            lambda before_id: list_documents(
                session,
                workspace_id=workspace_id,
                pipeline_id=pipeline_id,
                state=state,
                before_id=before_id,
                limit=limit,
            ),
            cursor,
        )
    return DocumentPage(documents=rows, next_cursor=next_cursor)


@router.get("/{pipeline_id}/documents/{document_id}", responses=responses(401, 404, 422, 503))
def get_pipeline_document(
    workspace_id: WorkspaceId,
    pipeline_id: PipelineId,
    document_id: Annotated[int, Path(ge=1, le=MAX_ID, description="A document of the pipeline (`id` in the list).")],
    api: Api,
) -> DocumentContent:
    """One of the pipeline's documents with the page's markdown and what extraction found about it."""
    with api.sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        return get_document(session, workspace_id=workspace_id, pipeline_id=pipeline_id, document_id=document_id)
