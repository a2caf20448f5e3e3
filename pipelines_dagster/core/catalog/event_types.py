"""The domain events a trigger can subscribe to: a closed set, so an unknown type is refused when a
trigger is created, not silently never fired."""

from __future__ import annotations

import enum

from pipelines_dagster.core.validation import validate_choice


class EventType(enum.StrEnum):
    """The domain events a trigger can subscribe to; an event may name the connector or pipeline it concerns."""

    CONNECTOR_URLS_CHANGED = "connector.urls_changed"
    """A connector's URL list was edited: re-crawl what it feeds."""
    DOCUMENT_UPLOADED = "document.uploaded"
    """A document was uploaded into the workspace's KB."""
    FOLDER_CHANGED = "folder.changed"
    """A KB folder was created, renamed or moved."""
    REFRESH_REQUESTED = "refresh.requested"
    """Someone asked for fresh content (a chat answer found it stale, an operator clicked refresh)."""


def validate_event_type(event_type: str, *, field: str = "event_type") -> EventType:
    return validate_choice(EventType, event_type, field=field, what="event type")
