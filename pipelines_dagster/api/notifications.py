"""A workspace's notification endpoints and their delivery logs, and the messages endpoints receive
(documented as the OpenAPI document's webhooks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Response, status
from pydantic import BaseModel, Field, Strict
from sqlalchemy.orm import Session

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas import RequestBody
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import DeliveryStatus, NotificationDelivery, NotificationEndpoint
from pipelines_dagster.core.security.signing import (
    DEFAULT_ROTATION_OVERLAP_SECONDS,
    MAX_ROTATION_OVERLAP_SECONDS,
    previous_secret_expiry,
)
from pipelines_dagster.core.validation import MAX_ID, MAX_URL_LENGTH, Id
from pipelines_dagster.notifications import endpoints
from pipelines_dagster.notifications.endpoints import MAX_CREDITS_THRESHOLD_MICROS, MAX_LIMIT
from pipelines_dagster.notifications.payloads import (
    TEST_EVENT,
    CreditsLowData,
    Message,
    NotificationEvent,
    PagesChangedData,
    RunEventData,
    TestData,
)
from pipelines_dagster.notifications.sender import DISABLE_AFTER, MAX_ATTEMPTS, REQUEST_TIMEOUT_SECONDS

router = APIRouter(prefix="/workspaces/{workspace_id}/notifications", tags=["notifications"])
# Documentation only: what an endpoint receives, given to FastAPI as the OpenAPI `webhooks`.
messages = APIRouter(tags=["notifications"])

EndpointId = Annotated[int, Path(ge=1, le=MAX_ID)]
DeliveryId = Annotated[int, Path(ge=1, le=MAX_ID)]
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


def _delivery_detail(session: Session, delivery: NotificationDelivery) -> NotificationDeliveryDetail:
    return NotificationDeliveryDetail(
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
            for attempt in endpoints.delivery_attempts(session, delivery.id)
        ],
    )


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(401, 404, 422))
def create_endpoint(workspace_id: WorkspaceId, body: EndpointIn, api: Api) -> NewEndpointOut:
    """Register an endpoint; its signing secret is shown once.

    The URL must resolve to addresses the crawler may reach, now and at every send.
    """
    with transaction(api.sessions) as session:
        made = endpoints.create_endpoint(
            session,
            api.notification_guard,
            workspace_id=workspace_id,
            url=body.url,
            event_types=body.event_types,
            pipeline_ids=body.pipeline_ids,
            credits_below_micros=body.credits_below_micros,
            description=body.description,
        )
        return NewEndpointOut(**EndpointOut.of(made.endpoint).model_dump(), secret=made.secret)


@router.get("", responses=responses(401, 404, 422))
def list_endpoints(workspace_id: WorkspaceId, api: Api) -> EndpointList:
    """The workspace's endpoints, oldest first, without their secrets."""
    with api.sessions() as session:
        return EndpointList(
            endpoints=[
                EndpointOut.of(endpoint) for endpoint in endpoints.list_endpoints(session, workspace_id=workspace_id)
            ]
        )


@router.get("/{endpoint_id}", responses=responses(401, 404, 422))
def get_endpoint(workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api) -> EndpointOut:
    """One endpoint, without its secret."""
    with api.sessions() as session:
        return EndpointOut.of(endpoints.get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id))


@router.delete("/{endpoint_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(401, 404, 422))
def delete_endpoint(workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api) -> Response:
    """Delete the endpoint with its deliveries and their log."""
    with transaction(api.sessions) as session:
        endpoints.delete_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{endpoint_id}/rotate-secret", responses=responses(401, 404, 422))
def rotate_secret(
    workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api, body: EndpointRotateIn | None = None
) -> RotatedEndpointOut:
    """Give the endpoint a new signing secret (shown once).

    For `overlap_seconds` (default a day) every message carries a signature under the secrets it had
    until now as well as under the new one, so the receiver can switch over when it likes.
    """
    with transaction(api.sessions) as session:
        rotated = endpoints.rotate_endpoint_secret(
            session,
            workspace_id=workspace_id,
            endpoint_id=endpoint_id,
            overlap_seconds=(body or EndpointRotateIn()).overlap_seconds,
        )
        return RotatedEndpointOut(**EndpointOut.of(rotated.endpoint).model_dump(), secret=rotated.secret)


def _set_enabled(api: Api, workspace_id: int, endpoint_id: int, *, enabled: bool) -> EndpointOut:
    with transaction(api.sessions) as session:
        return EndpointOut.of(
            endpoints.set_endpoint_enabled(session, workspace_id=workspace_id, endpoint_id=endpoint_id, enabled=enabled)
        )


@router.post("/{endpoint_id}/enable", responses=responses(401, 404, 422))
def enable_endpoint(workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api) -> EndpointOut:
    """Enable the endpoint, clearing why it was disabled and its failure streak; redrive what failed meanwhile."""
    return _set_enabled(api, workspace_id, endpoint_id, enabled=True)


@router.post("/{endpoint_id}/disable", responses=responses(401, 404, 422))
def disable_endpoint(workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api) -> EndpointOut:
    """Disable the endpoint: it is queued nothing, and its pending deliveries fail (to be redriven later)."""
    return _set_enabled(api, workspace_id, endpoint_id, enabled=False)


@router.post("/{endpoint_id}/test", responses=responses(401, 404, 422))
def test_endpoint(workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api) -> NotificationDeliveryDetail:
    """Send the endpoint a notification.test message now, enabled or not, and answer how it went.

    The answer is the delivery with its attempt: the endpoint's status code or the error, and how long
    it took. A test is sent once, never retried, and says nothing of the endpoint's health.
    """
    with transaction(api.sessions) as session:
        delivery_id = endpoints.queue_test(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    api.notification_sender.send_now([delivery_id])
    with api.sessions() as session:
        delivery = endpoints.get_delivery(
            session, workspace_id=workspace_id, endpoint_id=endpoint_id, delivery_id=delivery_id
        )
        return _delivery_detail(session, delivery)


@router.get("/{endpoint_id}/deliveries", responses=responses(401, 404, 422))
def list_deliveries(
    workspace_id: WorkspaceId,
    endpoint_id: EndpointId,
    api: Api,
    status: Annotated[DeliveryStatus | None, Query(description="Only deliveries in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Deliveries per page.")] = 20,
    cursor: Annotated[
        str | None, Query(pattern=r"^[0-9]{1,18}$", description="`next_cursor` of the previous page.")
    ] = None,
) -> NotificationDeliveryPage:
    """The endpoint's deliveries, newest first, without their bodies."""
    with api.sessions() as session:

        def page(size: int, before_id: int | None) -> list[NotificationDelivery]:
            return endpoints.list_deliveries(
                session,
                workspace_id=workspace_id,
                endpoint_id=endpoint_id,
                status=status,
                limit=size,
                before_id=before_id,
            )

        rows = page(limit, int(cursor) if cursor else None)
        # A full page may be the last one: the next is named only when it holds a delivery.
        more = len(rows) == limit and bool(page(1, rows[-1].id))
        return NotificationDeliveryPage(
            deliveries=[NotificationDeliveryOut.of(delivery) for delivery in rows],
            next_cursor=str(rows[-1].id) if more else None,
        )


@router.get("/{endpoint_id}/deliveries/{delivery_id}", responses=responses(401, 404, 422))
def get_delivery(
    workspace_id: WorkspaceId, endpoint_id: EndpointId, delivery_id: DeliveryId, api: Api
) -> NotificationDeliveryDetail:
    """One delivery with its body and every attempt, oldest first."""
    with api.sessions() as session:
        delivery = endpoints.get_delivery(
            session, workspace_id=workspace_id, endpoint_id=endpoint_id, delivery_id=delivery_id
        )
        return _delivery_detail(session, delivery)


@router.post("/{endpoint_id}/redrive", responses=responses(401, 404, 409, 422))
def redrive(workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api, body: RedriveIn | None = None) -> RedriveOut:
    """Send deliveries again from the first step of the retry schedule, with the same webhook-id and body.

    Without `delivery_ids`, every failed delivery of the endpoint. A disabled endpoint is refused: enable it first.
    """
    with transaction(api.sessions) as session:
        count = endpoints.redrive(
            session,
            workspace_id=workspace_id,
            endpoint_id=endpoint_id,
            delivery_ids=(body or RedriveIn()).delivery_ids,
        )
    return RedriveOut(redriven=count)


def _signed(
    webhook_id: Annotated[
        str,
        Header(
            alias="webhook-id",
            description="The message's id, the same on every attempt and redrive of it: dedupe on it.",
        ),
    ],
    webhook_timestamp: Annotated[
        int,
        Header(
            alias="webhook-timestamp",
            description="Unix seconds when this attempt was signed; refuse one far from your clock (5 min).",
        ),
    ],
    webhook_signature: Annotated[
        str,
        Header(
            alias="webhook-signature",
            description='`v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">` under each live '
            "secret, space-separated: during a rotation's overlap one under the new secret and one under each "
            "previous one. The HMAC key is the secret's base64 part after `whsec_`.",
        ),
    ],
) -> None:
    """The Standard Webhooks headers every message is sent with; receivers verify them."""


def _message(event_type: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Document what an endpoint receives for `event_type`: the body, its headers, and what the answer means."""
    return messages.post(
        event_type,
        dependencies=[Depends(_signed)],
        response_class=Response,
        response_description="Delivered: any 2xx within the timeout counts; the body is ignored.",
        responses={
            "default": {
                "description": f"Anything else, no answer within {REQUEST_TIMEOUT_SECONDS:g} s, or a redirect (not "
                f"followed): retried with backoff, {MAX_ATTEMPTS} attempts over about a day, under the same webhook-id."
            }
        },
    )


@_message(NotificationEvent.RUN_SUCCEEDED)
def run_succeeded(message: Message[RunEventData]) -> None:
    """A pipeline's run succeeded (in a batch run, this pipeline's part of it)."""


@_message(NotificationEvent.RUN_FAILED)
def run_failed(message: Message[RunEventData]) -> None:
    """A pipeline's run failed; `will_retry` says whether Dagster runs it again."""


@_message(NotificationEvent.RUN_CANCELED)
def run_canceled(message: Message[RunEventData]) -> None:
    """A pipeline's run was canceled."""


@_message(NotificationEvent.PAGES_CHANGED)
def pages_changed(message: Message[PagesChangedData]) -> None:
    """A crawl found new, changed or removed pages; a changed page's `diff_url` answers its diff."""


@_message(NotificationEvent.CREDITS_LOW)
def credits_low(message: Message[CreditsLowData]) -> None:
    """A charge took the workspace's balance under the endpoint's `credits_below_micros`."""


@_message(TEST_EVENT)
def notification_test(message: Message[TestData]) -> None:
    """Sent by `POST .../notifications/{endpoint_id}/test`, whatever the endpoint subscribes to."""
