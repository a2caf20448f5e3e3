"""A workspace's notification endpoints and their deliveries: what registers or changes an endpoint, and how
an endpoint, a delivery with its attempts, and a page of deliveries are shown."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, Strict

from pipelines_dagster.api.schemas.common import RequestBody
from pipelines_dagster.app_db.models import (
    DeliveryStatus,
    NotificationAttempt,
    NotificationDelivery,
    NotificationEndpoint,
)
from pipelines_dagster.core.security.signing import (
    DEFAULT_ROTATION_OVERLAP_SECONDS,
    MAX_ROTATION_OVERLAP_SECONDS,
    previous_secret_expiry,
)
from pipelines_dagster.core.validation import MAX_URL_LENGTH, Id
from pipelines_dagster.notifications.endpoints import (
    MAX_CREDITS_THRESHOLD_MICROS,
    MAX_LIMIT,
    NewEndpoint,
    RotatedEndpointSecret,
)
from pipelines_dagster.notifications.payloads import NotificationEvent
from pipelines_dagster.notifications.sender import DISABLE_AFTER, MAX_ATTEMPTS

# A request names at most a thousand pipelines (and a redrive a page of deliveries).
MAX_PIPELINE_IDS = 1000


class EndpointIn(RequestBody):
    url: str = Field(
        max_length=MAX_URL_LENGTH,
        description="Where messages are POSTed: an absolute http(s) URL whose host resolves only to public "
        "addresses (or to networks the deployment allows the crawler).",
    )
    # Strict(False) on the item: a field's strict=False does not reach into its list.
    event_types: list[Annotated[NotificationEvent, Strict(False)]] = Field(
        min_length=1, description="The events to hear of."
    )
    pipeline_ids: list[Id] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PIPELINE_IDS,
        description="Only the run and page events of these pipelines of the workspace; null for all of them.",
    )
    credits_below_micros: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CREDITS_THRESHOLD_MICROS,
        description="Required with credits.low, and only then: notify when a charge takes the balance from at "
        "least this to under it, in micro-credits.",
    )
    description: str | None = Field(default=None, max_length=200)


class EndpointOut(BaseModel):
    id: int
    url: str
    description: str | None
    event_types: list[str]
    pipeline_ids: list[int] | None = Field(description="null: every pipeline of the workspace.")
    credits_below_micros: int | None
    enabled: bool
    disabled_reason: str | None
    failing_since: datetime | None = Field(
        description="Since the first failed attempt after the last delivered one; null while deliveries succeed. "
        f"An endpoint failing for {DISABLE_AFTER.days} days is disabled."
    )
    previous_secret_expires_at: datetime | None = Field(
        description="After a secret rotation: until when messages are signed with the previous secret too."
    )
    created_at: datetime

    @classmethod
    def of(cls, endpoint: NotificationEndpoint) -> EndpointOut:
        return cls(
            id=endpoint.id,
            url=endpoint.url,
            description=endpoint.description,
            event_types=endpoint.event_types,
            pipeline_ids=endpoint.pipeline_ids,
            credits_below_micros=endpoint.credits_below_micros,
            enabled=endpoint.enabled,
            disabled_reason=endpoint.disabled_reason,
            failing_since=endpoint.failing_since,
            previous_secret_expires_at=previous_secret_expiry(endpoint.signing_secrets, datetime.now(UTC)),
            created_at=endpoint.created_at,
        )


class NewEndpointOut(EndpointOut):
    secret: str = Field(description="The whsec_ secret messages are signed with; shown once.")

    @classmethod
    def of_new(cls, made: NewEndpoint) -> NewEndpointOut:
        return cls(**EndpointOut.of(made.endpoint).model_dump(), secret=made.secret)


class EndpointList(BaseModel):
    endpoints: list[EndpointOut]


class EndpointRotateIn(RequestBody):
    overlap_seconds: int = Field(
        default=DEFAULT_ROTATION_OVERLAP_SECONDS,
        ge=0,
        le=MAX_ROTATION_OVERLAP_SECONDS,
        description="How long messages are signed with the secrets the endpoint had until now as well.",
    )


class RotatedEndpointOut(EndpointOut):
    secret: str = Field(description="The new whsec_ signing secret; shown once.")

    @classmethod
    def of_rotated(cls, rotated: RotatedEndpointSecret) -> RotatedEndpointOut:
        return cls(**EndpointOut.of(rotated.endpoint).model_dump(), secret=rotated.secret)


class DeliveryAttemptOut(BaseModel):
    attempted_at: datetime
    status_code: int | None = Field(description="The endpoint's answer; null when none came.")
    error: str | None = Field(description="Why the attempt failed; null when it delivered.")
    duration_ms: int
    succeeded: bool


class NotificationDeliveryOut(BaseModel):
    id: int
    event_type: str
    message_id: str = Field(description="The webhook-id header: the same on every attempt and redrive.")
    status: DeliveryStatus = Field(
        description="pending: waiting for its next attempt. failed: out of attempts, or the endpoint was disabled."
    )
    attempts: int = Field(description=f"Attempts since it was queued or last redriven; {MAX_ATTEMPTS} at most.")
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None

    @classmethod
    def of(cls, delivery: NotificationDelivery) -> NotificationDeliveryOut:
        return cls(
            id=delivery.id,
            event_type=delivery.event_type,
            message_id=delivery.message_id,
            status=DeliveryStatus(delivery.status),
            attempts=delivery.attempts,
            next_attempt_at=delivery.next_attempt_at,
            last_status_code=delivery.last_status_code,
            last_error=delivery.last_error,
            created_at=delivery.created_at,
            delivered_at=delivery.delivered_at,
        )


class NotificationDeliveryDetail(NotificationDeliveryOut):
    payload: dict[str, Any] = Field(description="The body as sent, byte for byte on every attempt: a message below.")
    attempt_log: list[DeliveryAttemptOut] = Field(description="Every request sent, oldest first.")

    @classmethod
    def with_attempts(
        cls, delivery: NotificationDelivery, attempts: Iterable[NotificationAttempt]
    ) -> NotificationDeliveryDetail:
        """The delivery with its attempts (`endpoints.delivery_attempts`), oldest first."""
        return cls(
            **NotificationDeliveryOut.of(delivery).model_dump(),
            payload=json.loads(delivery.payload),
            attempt_log=[
                DeliveryAttemptOut(
                    attempted_at=attempt.attempted_at,
                    status_code=attempt.status_code,
                    error=attempt.error,
                    duration_ms=attempt.duration_ms,
                    succeeded=attempt.succeeded,
                )
                for attempt in attempts
            ],
        )


class NotificationDeliveryPage(BaseModel):
    deliveries: list[NotificationDeliveryOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last.")


class RedriveIn(RequestBody):
    delivery_ids: list[Id] | None = Field(
        default=None,
        max_length=MAX_LIMIT,
        description="Deliveries of this endpoint to send again, whatever their status; null: every failed one.",
    )


class RedriveOut(BaseModel):
    redriven: int = Field(description="Deliveries made pending again, due now.")
