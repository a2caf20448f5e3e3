"""A pipeline's page changes: one change, and a page of its timeline."""

from __future__ import annotations

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from pipelines_dagster.core.kb.changes import PageChangeView


class PageChangeOut(PageChangeView):
    # The route names its pipeline already.
    pipeline_id: SkipJsonSchema[int] = Field(exclude=True)


class PageChangePage(BaseModel):
    changes: list[PageChangeOut]
    next_cursor: str | None
