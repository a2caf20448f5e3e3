"""The event inbox: domain events recorded for the event sensor to turn into runs of the pipelines subscribed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import DomainEvent
from pipelines_dagster.core.catalog.event_types import validate_event_type
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.validation import validate_id


def emit_event(
    session: Session, *, workspace_id: int, event_type: str, payload: Mapping[str, Any] | None = None
) -> DomainEvent:
    """Record a domain event; subscribed pipelines of the workspace run on the event sensor's next tick."""
    kind = validate_event_type(event_type)
    get_workspace(session, workspace_id)
    body = dict(payload or {})
    for key in ("connector_id", "pipeline_id"):
        if key in body:
            validate_id(body[key], field=f"payload.{key}")
    event = DomainEvent(workspace_id=workspace_id, event_type=kind.value, payload=body)
    session.add(event)
    session.flush()
    return event
