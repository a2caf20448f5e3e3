"""A pipeline's KB documents as the API lists them (newest first, by state, archived ones included) and reads
one, with its content."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, cast

import pydantic
import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Document
from pipelines_dagster.core.errors import NotFoundError

DocumentListState = Literal["pending", "ready", "failed", "archived"]
ARCHIVED: DocumentListState = "archived"
MAX_LIMIT = 100


class DocumentView(pydantic.BaseModel):
    id: int
    url: str | None
    title: str | None
    state: DocumentListState
    """`archived` once a healthy crawl no longer covered the page; otherwise the indexing state."""
    reason: str | None
    """Why a document is `failed`."""
    folder_id: int | None
    """None is the workspace root."""
    updated_at: datetime
    archived_at: datetime | None
    archived_by_run_id: str | None

    @classmethod
    def of(cls, document: Document) -> DocumentView:
        return cls(
            id=document.id,
            url=document.url,
            title=document.title,
            # The column's check constraint holds it to the other three states.
            state=ARCHIVED if document.archived_at is not None else cast(DocumentListState, document.status_state),
            reason=document.status_reason,
            folder_id=document.folder_id,
            updated_at=document.updated_at,
            archived_at=document.archived_at,
            archived_by_run_id=document.archived_by_run_id,
        )


def list_documents(
    session: Session,
    *,
    workspace_id: int,
    pipeline_id: int,
    state: DocumentListState | None = None,
    before_id: int | None = None,
    limit: int = 20,
) -> tuple[list[DocumentView], int | None]:
    """A pipeline's documents, newest first, and the id to pass as `before_id` for the next page."""
    query = (
        sa.select(Document)
        .where(Document.workspace_id == workspace_id, Document.pipeline_id == pipeline_id)
        # The content can be large and a listing does not show it.
        .options(orm.defer(Document.content), orm.defer(Document.document_metadata))
    )
    if state == ARCHIVED:
        query = query.where(Document.archived_at.is_not(None))
    elif state is not None:
        query = query.where(Document.archived_at.is_(None), Document.status_state == state)
    if before_id is not None:
        query = query.where(Document.id < before_id)
    found = list(session.scalars(query.order_by(Document.id.desc()).limit(limit + 1)))
    rows = [DocumentView.of(document) for document in found[:limit]]
    return rows, (rows[-1].id if len(found) > limit else None)


class DocumentContent(DocumentView):
    content: str | None
    """The page's text as markdown; None until a crawl stored it (pending, or failed the first time)."""
    content_hash: str | None
    metadata: dict[str, Any]
    """What the extraction found about the page (title, description, author, date, ...)."""
    created_at: datetime


def get_document(session: Session, *, workspace_id: int, pipeline_id: int, document_id: int) -> DocumentContent:
    """One of the pipeline's documents with its content; NotFoundError when it is not the pipeline's."""
    document = session.get(Document, document_id)
    if document is None or (document.workspace_id, document.pipeline_id) != (workspace_id, pipeline_id):
        raise NotFoundError(f"pipeline {pipeline_id} has no document {document_id}")
    return DocumentContent(
        **DocumentView.of(document).model_dump(),
        content=document.content,
        content_hash=document.content_hash,
        metadata=document.document_metadata or {},
        created_at=document.created_at,
    )
