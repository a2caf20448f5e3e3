"""A workspace's notification endpoints and their delivery logs: what users create, list, rotate,
test and redrive. Bad input raises InvalidInputError naming the field, before anything is written."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import (
    DeliveryStatus,
    NotificationAttempt,
    NotificationDelivery,
    NotificationEndpoint,
    Pipeline,
)
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.errors import ConflictError, InvalidInputError, NotFoundError
from pipelines_dagster.core.security.signing import (
    DEFAULT_ROTATION_OVERLAP_SECONDS,
    first_secrets,
    new_signing_secret,
    rotate,
)
from pipelines_dagster.core.validation import validate_choice, validate_name
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.events import new_message_id, queue
from pipelines_dagster.notifications.payloads import TEST_EVENT, NotificationEvent, TestData

# A credits.low threshold above this (a million credits) is a typo, not a threshold.
MAX_CREDITS_THRESHOLD_MICROS = 10**12
MAX_LIMIT = 100


class EndpointDisabledError(ConflictError):
    """The endpoint is disabled, so what was asked cannot be done now; the message says what to do."""


@dataclass(frozen=True)
class NewEndpoint:
    endpoint: NotificationEndpoint
    secret: str
    """Shown once: the whsec_ secret deliveries are signed with."""


def validate_event_types(event_types: Iterable[str], *, field: str = "event_types") -> list[str]:
    chosen = [validate_choice(NotificationEvent, value, field=field, what="event type").value for value in event_types]
    if not chosen:
        raise InvalidInputError(field, f"subscribe to at least one of {', '.join(NotificationEvent)}")
    return list(dict.fromkeys(chosen))


def _threshold(event_types: list[str], credits_below_micros: int | None) -> int | None:
    field = "credits_below_micros"
    if NotificationEvent.CREDITS_LOW not in event_types:
        if credits_below_micros is not None:
            raise InvalidInputError(field, "is only for an endpoint subscribed to credits.low")
        return None
    if credits_below_micros is None:
        raise InvalidInputError(field, "credits.low needs the balance, in micro-credits, under which to notify")
    if (
        isinstance(credits_below_micros, bool)
        or not isinstance(credits_below_micros, int)
        or not 1 <= credits_below_micros <= MAX_CREDITS_THRESHOLD_MICROS
    ):
        raise InvalidInputError(
            field, f"must be a whole number of micro-credits from 1 to {MAX_CREDITS_THRESHOLD_MICROS}"
        )
    return credits_below_micros


def _pipelines(session: Session, workspace_id: int, pipeline_ids: Iterable[int] | None) -> list[int] | None:
    if pipeline_ids is None:
        return None
    wanted = list(dict.fromkeys(pipeline_ids))
    if not wanted:
        raise InvalidInputError("pipeline_ids", "name at least one pipeline, or leave it out for all of them")
    if any(isinstance(value, bool) or not isinstance(value, int) for value in wanted):
        raise InvalidInputError("pipeline_ids", "must be pipeline ids (integers)")
    found = set(
        session.scalars(sa.select(Pipeline.id).where(Pipeline.workspace_id == workspace_id, Pipeline.id.in_(wanted)))
    )
    if missing := [value for value in wanted if value not in found]:
        raise InvalidInputError("pipeline_ids", f"no pipeline {missing[0]} in workspace {workspace_id}")
    return wanted


def create_endpoint(
    session: Session,
    guard: DestinationGuard,
    *,
    workspace_id: int,
    url: str,
    event_types: Iterable[str],
    pipeline_ids: Iterable[int] | None = None,
    credits_below_micros: int | None = None,
    description: str | None = None,
) -> NewEndpoint:
    """Register an endpoint; its URL must pass the destination guard now (and will at every send)."""
    get_workspace(session, workspace_id)
    events = validate_event_types(event_types)
    threshold = _threshold(events, credits_below_micros)
    pipelines = _pipelines(session, workspace_id, pipeline_ids)
    label = validate_name(description, field="description") if description is not None else None
    checked_url = guard.check(url)
    secret = new_signing_secret()
    endpoint = NotificationEndpoint(
        workspace_id=workspace_id,
        url=checked_url,
        description=label,
        event_types=events,
        pipeline_ids=pipelines,
        credits_below_micros=threshold,
        signing_secrets=first_secrets(secret),
    )
    session.add(endpoint)
    session.flush()
    return NewEndpoint(endpoint, secret)


def list_endpoints(session: Session, *, workspace_id: int) -> list[NotificationEndpoint]:
    get_workspace(session, workspace_id)
    return list(
        session.scalars(
            sa.select(NotificationEndpoint)
            .where(NotificationEndpoint.workspace_id == workspace_id)
            .order_by(NotificationEndpoint.id)
        )
    )


def get_endpoint(session: Session, *, workspace_id: int, endpoint_id: int) -> NotificationEndpoint:
    endpoint = session.get(NotificationEndpoint, endpoint_id)
    if endpoint is None or endpoint.workspace_id != workspace_id:
        raise NotFoundError(f"notification endpoint {endpoint_id} does not exist in workspace {workspace_id}")
    return endpoint


def delete_endpoint(session: Session, *, workspace_id: int, endpoint_id: int) -> None:
    """Delete an endpoint with its deliveries and their log."""
    session.delete(get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id))
    session.flush()


@dataclass(frozen=True)
class RotatedEndpointSecret:
    endpoint: NotificationEndpoint
    secret: str
    """Shown once: the new whsec_ secret."""
    previous_expires_at: datetime
    """Until then deliveries are signed with the previous secrets too."""


def rotate_endpoint_secret(
    session: Session,
    *,
    workspace_id: int,
    endpoint_id: int,
    overlap_seconds: int = DEFAULT_ROTATION_OVERLAP_SECONDS,
    now: datetime | None = None,
) -> RotatedEndpointSecret:
    """A new signing secret; for `overlap_seconds` every delivery carries signatures under the old
    and the new, so the receiver can switch when it likes."""
    endpoint = get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    secret, endpoint.signing_secrets, expires_at = rotate(
        endpoint.signing_secrets, overlap_seconds=overlap_seconds, now=now or datetime.now(UTC)
    )
    session.flush()
    return RotatedEndpointSecret(endpoint, secret, expires_at)


def set_endpoint_enabled(
    session: Session, *, workspace_id: int, endpoint_id: int, enabled: bool
) -> NotificationEndpoint:
    """Enable (clearing why it was disabled and its failure streak) or disable an endpoint. A disabled
    endpoint is queued nothing and its pending deliveries fail; they can be redriven once it is enabled."""
    endpoint = get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    if enabled:
        endpoint.enabled = True
        endpoint.disabled_reason = endpoint.failing_since = None
        session.flush()
    elif endpoint.enabled:
        disable(session, endpoint.id, reason="disabled by a user")
        session.refresh(endpoint)
    return endpoint


def disable(session: Session, endpoint_id: int, *, reason: str) -> None:
    """Disable an endpoint for `reason`: its pending deliveries fail with it, to be redriven later."""
    session.execute(
        sa.update(NotificationEndpoint)
        .where(NotificationEndpoint.id == endpoint_id)
        .values(enabled=False, disabled_reason=reason)
    )
    session.execute(
        sa.update(NotificationDelivery)
        .where(
            NotificationDelivery.endpoint_id == endpoint_id,
            NotificationDelivery.status == DeliveryStatus.PENDING.value,
        )
        .values(status=DeliveryStatus.FAILED.value, next_attempt_at=None, last_error=f"endpoint disabled: {reason}")
        .execution_options(synchronize_session=False)
    )


def list_deliveries(
    session: Session,
    *,
    workspace_id: int,
    endpoint_id: int,
    status: str | None = None,
    limit: int = 20,
    before_id: int | None = None,
) -> tuple[list[NotificationDelivery], int | None]:
    """An endpoint's deliveries, newest first, a page at a time (`before_id`: the last id of the page before),
    and the id to pass as `before_id` for the next page; None on the last, also when a last page is full."""
    get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError("limit", f"must be from 1 to {MAX_LIMIT}")
    query = sa.select(NotificationDelivery).where(NotificationDelivery.endpoint_id == endpoint_id)
    if status is not None:
        query = query.where(
            NotificationDelivery.status == validate_choice(DeliveryStatus, status, field="status", what="status").value
        )
    if before_id is not None:
        query = query.where(NotificationDelivery.id < before_id)
    found = list(session.scalars(query.order_by(NotificationDelivery.id.desc()).limit(limit + 1)))
    rows = found[:limit]
    return rows, (rows[-1].id if len(found) > limit else None)


def get_delivery(session: Session, *, workspace_id: int, endpoint_id: int, delivery_id: int) -> NotificationDelivery:
    get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    delivery = session.get(NotificationDelivery, delivery_id)
    if delivery is None or delivery.endpoint_id != endpoint_id:
        raise NotFoundError(f"delivery {delivery_id} is not a delivery of notification endpoint {endpoint_id}")
    return delivery


def delivery_attempts(session: Session, delivery_id: int) -> list[NotificationAttempt]:
    return list(
        session.scalars(
            sa.select(NotificationAttempt)
            .where(NotificationAttempt.delivery_id == delivery_id)
            .order_by(NotificationAttempt.id)
        )
    )


def redrive(
    session: Session,
    *,
    workspace_id: int,
    endpoint_id: int,
    delivery_ids: Iterable[int] | None = None,
    now: datetime | None = None,
) -> int:
    """Send deliveries again, from the first step of the retry schedule, with the same webhook-id and
    body: the ones named, or (none named) every failed one of the endpoint. How many were redriven.
    Test messages are not: each is sent once, by the test that made it."""
    endpoint = get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    if not endpoint.enabled:
        raise EndpointDisabledError(
            f"notification endpoint {endpoint_id} is disabled ({endpoint.disabled_reason}); enable it first"
        )
    query = sa.update(NotificationDelivery).where(
        NotificationDelivery.endpoint_id == endpoint_id, NotificationDelivery.event_type != TEST_EVENT
    )
    if delivery_ids is None:
        query = query.where(NotificationDelivery.status == DeliveryStatus.FAILED.value)
    else:
        wanted = list(delivery_ids)
        for delivery_id in wanted:
            get_delivery(session, workspace_id=workspace_id, endpoint_id=endpoint_id, delivery_id=delivery_id)
        query = query.where(NotificationDelivery.id.in_(wanted))
    result = session.execute(
        query.values(
            status=DeliveryStatus.PENDING.value,
            attempts=0,
            next_attempt_at=now or datetime.now(UTC),
            leased_until=None,
            # What the last round ended with stays in the attempt log.
            last_status_code=None,
            last_error=None,
            delivered_at=None,
        ).execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def queue_test(session: Session, *, workspace_id: int, endpoint_id: int, now: datetime | None = None) -> int:
    """Queue a notification.test message to the endpoint (enabled or not, to check it before enabling
    it); the delivery's id. `Sender.send_now` sends it, once: it is not retried, and its result says
    nothing of the endpoint's health."""
    endpoint = get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    moment = now or datetime.now(UTC)
    data = TestData(workspace_id=workspace_id, endpoint_id=endpoint_id, message="A test from pipelines-dagster.")
    [delivery_id] = queue(
        session, [endpoint], event_type=TEST_EVENT, dedupe_key=f"{TEST_EVENT}:{new_message_id()}", data=data, now=moment
    )
    return delivery_id
