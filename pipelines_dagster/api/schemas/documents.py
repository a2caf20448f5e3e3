"""A page of a pipeline's KB documents."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pipelines_dagster.core.kb.documents import DocumentView


class DocumentPage(BaseModel):
    documents: list[DocumentView]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last.")
