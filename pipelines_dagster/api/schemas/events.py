"""A workspace's domain events: one recorded, for the pipelines subscribed to its type."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from pipelines_dagster.api.schemas.common import RequestBody
from pipelines_dagster.core.catalog.event_types import EventType


class EventIn(RequestBody):
    event_type: EventType = Field(strict=False)
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form; an integer `connector_id` or `pipeline_id` narrows which pipelines run.",
    )


class EventOut(BaseModel):
    event_id: int
    event_type: str
