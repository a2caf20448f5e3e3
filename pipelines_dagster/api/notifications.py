"""A workspace's notification endpoints and their delivery logs, and the messages endpoints receive
(documented as the OpenAPI document's webhooks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Response, status

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.operations import operation_id
from pipelines_dagster.api.paging import Cursor, keyset_page
from pipelines_dagster.api.schemas.notifications import (
    EndpointIn,
    EndpointList,
    EndpointOut,
    EndpointRotateIn,
    NewEndpointOut,
    NotificationDeliveryDetail,
    NotificationDeliveryOut,
    NotificationDeliveryPage,
    RedriveIn,
    RedriveOut,
    RotatedEndpointOut,
)
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import DeliveryStatus
from pipelines_dagster.core.validation import MAX_ID
from pipelines_dagster.notifications import endpoints
from pipelines_dagster.notifications.endpoints import MAX_LIMIT
from pipelines_dagster.notifications.payloads import (
    TEST_EVENT,
    CreditsLowData,
    Message,
    NotificationEvent,
    PagesChangedData,
    RunEventData,
    TestData,
)
from pipelines_dagster.notifications.sender import MAX_ATTEMPTS, REQUEST_TIMEOUT_SECONDS

router = APIRouter(prefix="/workspaces/{workspace_id}/notifications", tags=["notifications"])
# Documentation only: what an endpoint receives, given to FastAPI as the OpenAPI `webhooks`.
messages = APIRouter(tags=["notifications"], generate_unique_id_function=operation_id)

EndpointId = Annotated[int, Path(ge=1, le=MAX_ID)]
DeliveryId = Annotated[int, Path(ge=1, le=MAX_ID)]


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
        return NewEndpointOut.of_new(made)


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
def rotate_endpoint_secret(
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
        return RotatedEndpointOut.of_rotated(rotated)


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
        return NotificationDeliveryDetail.with_attempts(delivery, endpoints.delivery_attempts(session, delivery.id))


@router.get("/{endpoint_id}/deliveries", responses=responses(401, 404, 422))
def list_deliveries(
    workspace_id: WorkspaceId,
    endpoint_id: EndpointId,
    api: Api,
    status: Annotated[DeliveryStatus | None, Query(description="Only deliveries in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Deliveries per page.")] = 20,
    cursor: Cursor = None,
) -> NotificationDeliveryPage:
    """The endpoint's deliveries, newest first, without their bodies."""
    with api.sessions() as session:
        rows, next_cursor = keyset_page(
            lambda before_id: endpoints.list_deliveries(
                session,
                workspace_id=workspace_id,
                endpoint_id=endpoint_id,
                status=status,
                limit=limit,
                before_id=before_id,
            ),
            cursor,
        )
        return NotificationDeliveryPage(
            deliveries=[NotificationDeliveryOut.of(delivery) for delivery in rows], next_cursor=next_cursor
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
        return NotificationDeliveryDetail.with_attempts(delivery, endpoints.delivery_attempts(session, delivery.id))


@router.post("/{endpoint_id}/redrive", responses=responses(401, 404, 409, 422))
def redrive_deliveries(
    workspace_id: WorkspaceId, endpoint_id: EndpointId, api: Api, body: RedriveIn | None = None
) -> RedriveOut:
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
