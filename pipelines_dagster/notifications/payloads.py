"""What notifications say: the event types, and each one's payload as a model.

Every body is a Standard Webhooks message, `{"type": ..., "timestamp": ..., "data": {...}}`. The
models document the bodies in the OpenAPI document and build them, so the two cannot drift.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Generic, Literal, TypeVar

import orjson
import pydantic

from pipelines_dagster.app_db.models import PageChangeStatus


class NotificationEvent(enum.StrEnum):
    """The events an endpoint can subscribe to."""

    RUN_SUCCEEDED = "run.succeeded"
    RUN_FAILED = "run.failed"
    RUN_CANCELED = "run.canceled"
    PAGES_CHANGED = "pages.changed"
    """One per crawl that found new, changed or removed pages."""
    CREDITS_LOW = "credits.low"
    """A charge took the workspace's balance under the endpoint's threshold."""


# A pages.changed message lists this many changes at most; its changes_url has them all.
MAX_LISTED_CHANGES = 1000
# Sent by `notification test` to one endpoint, whatever it subscribes to; never subscribed to.
TEST_EVENT = "notification.test"

# By the status run history gives a pipeline's run (in a batch run, the pipeline's own).
RUN_EVENTS = {
    "succeeded": NotificationEvent.RUN_SUCCEEDED,
    "failed": NotificationEvent.RUN_FAILED,
    "canceled": NotificationEvent.RUN_CANCELED,
}


class CrawlCounts(pydantic.BaseModel):
    attempted: int | None = pydantic.Field(description="URLs the crawl tried; null when it never crawled.")
    succeeded: int | None
    empty: int | None
    failed: int | None


class DocumentCounts(pydantic.BaseModel):
    created: int | None
    updated: int | None
    unchanged: int | None


class RunEventData(pydantic.BaseModel):
    """A pipeline run that ended: run.succeeded, run.failed or run.canceled."""

    workspace_id: int
    pipeline_id: int
    pipeline_name: str | None
    run_id: str
    status: Literal["succeeded", "failed", "canceled"] = pydantic.Field(
        description="The pipeline's own: in a batch run, one pipeline may succeed while another fails."
    )
    trigger: str | None = pydantic.Field(description="schedule, webhook, event or manual")
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None
    crawls: CrawlCounts
    documents: DocumentCounts
    charged_micros: int | None = pydantic.Field(
        description="The crawl's charge, in micro-credits, shared by the runs that retry or re-execute it."
    )
    new_charge_micros: int | None = pydantic.Field(
        description="What this run charged itself (0 when a retry or re-execution found the charge made)."
    )
    error: str | None = pydantic.Field(description="Why a failed run failed.")
    will_retry: bool = pydantic.Field(description="Dagster will retry this failed run (its process died).")
    run_url: str | None = pydantic.Field(
        description="The run in the Dagster UI (PIPELINES_DAGSTER_URL, by default http://127.0.0.1:3000)."
    )


class PageChangeItem(pydantic.BaseModel):
    url: str
    status: PageChangeStatus
    change_id: int
    diff_url: str | None = pydantic.Field(
        description="The change with its unified diff, through the HTTP API (a changed page's diff)."
    )


class PagesChangedData(pydantic.BaseModel):
    """The pages a crawl found new, changed or removed."""

    workspace_id: int
    pipeline_id: int
    run_id: str = pydantic.Field(description="The crawl_results run whose crawl was compared.")
    new: int
    changed: int
    removed: int
    changes: list[PageChangeItem] = pydantic.Field(description=f"The first {MAX_LISTED_CHANGES} changes at most.")
    truncated: bool = pydantic.Field(description="More changes than listed: read them through changes_url.")
    changes_url: str | None = pydantic.Field(description="The pipeline's change timeline in the HTTP API.")


class CreditsLowData(pydantic.BaseModel):
    """A charge took the balance from at least the endpoint's threshold to under it."""

    workspace_id: int
    balance_micros: int
    threshold_micros: int
    charged_micros: int
    pipeline_id: int | None
    run_id: str | None


class TestData(pydantic.BaseModel):
    workspace_id: int
    endpoint_id: int
    message: str


D = TypeVar("D", bound=pydantic.BaseModel)


class Message(pydantic.BaseModel, Generic[D]):
    """The body of every notification."""

    type: str
    timestamp: datetime
    data: D


def body(event_type: str, data: pydantic.BaseModel, *, timestamp: datetime) -> bytes:
    """The JSON body of a message: what is signed, stored and sent, byte for byte, on every attempt."""
    message = {"type": event_type, "timestamp": timestamp.isoformat(), "data": data.model_dump(mode="json")}
    return orjson.dumps(message)
