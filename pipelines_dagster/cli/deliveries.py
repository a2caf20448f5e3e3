"""`pipelines-dagster notification test|deliveries|redrive`: a notification endpoint's deliveries, one sent now,
the log of them, and failed ones sent again; and where deliveries may go."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipelines_dagster.api.schemas.notifications import (
    NotificationDeliveryDetail,
    NotificationDeliveryOut,
    NotificationDeliveryPage,
    RedriveOut,
)
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import DeliveryStatus
from pipelines_dagster.cli.common import ID, emit, endpoint_ref, json_option, open_sessions, plural, user_errors
from pipelines_dagster.notifications import endpoints as notifications
from pipelines_dagster.settings import Settings, load_settings

if TYPE_CHECKING:
    from pipelines_dagster.notifications.destination import DestinationGuard


def destination_guard(settings: Settings) -> DestinationGuard:
    """Where notifications may go: the crawler's network settings, as the deployment's resource has them."""
    from pipelines_dagster.resources.deployment import build_resources

    return build_resources(settings)["notifications"].guard()


def describe_delivery(shown: NotificationDeliveryOut) -> str:
    """One line per delivery: id, event type, status, attempts, how the last attempt went, webhook-id."""
    if shown.last_error:
        last = shown.last_error
    elif shown.last_status_code is not None:
        last = f"HTTP {shown.last_status_code}"
    else:
        last = "not sent yet"
    attempts = plural(shown.attempts, "attempt")
    return f"{shown.id}\t{shown.event_type}\t{shown.status.value}\t{attempts}\t{last}\t{shown.message_id}"


@click.command("test")
@endpoint_ref
@json_option
@user_errors
def notification_test(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Send the endpoint a notification.test message now, enabled or not; exits non-zero when it is not taken."""
    from pipelines_dagster.notifications.sender import Sender

    settings = load_settings()
    sessions = open_sessions(settings)
    with transaction(sessions) as session:
        url = notifications.get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id).url
        delivery_id = notifications.queue_test(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    results = Sender(sessions, destination_guard(settings)).send_now([delivery_id])
    if not results:
        raise click.ClickException(
            f"test delivery {delivery_id} was taken by another sender; see `pipelines-dagster notification "
            f"deliveries --workspace {workspace_id} --endpoint {endpoint_id}`"
        )
    [result] = results
    with sessions() as session:
        delivery = notifications.get_delivery(
            session, workspace_id=workspace_id, endpoint_id=endpoint_id, delivery_id=delivery_id
        )
        attempts = notifications.delivery_attempts(session, delivery.id)
        # As `POST .../test` answers: the delivery with its attempt.
        shown = NotificationDeliveryDetail.with_attempts(delivery, attempts)
    answer = f"HTTP {result.status_code}" if result.status_code is not None else "no answer"
    emit(
        as_json,
        shown,
        f"notification endpoint {endpoint_id}: test delivery {delivery_id} (webhook-id {shown.message_id}) "
        f"to {url}: {answer} in {result.duration_ms} ms",
    )
    if not result.succeeded:
        raise click.ClickException(
            f"the endpoint did not take the test delivery ({result.error}); it is retried like any delivery, "
            "or fix the receiver and run `notification test` again"
        )


@click.command("deliveries")
@endpoint_ref
@click.option(
    "--status",
    type=click.Choice([member.value for member in DeliveryStatus]),
    default=None,
    help="Only deliveries in this status.",
)
@click.option(
    "--limit", default=20, show_default=True, type=int, help=f"Deliveries per page, 1 to {notifications.MAX_LIMIT}."
)
@click.option("--cursor", type=ID, default=None, help="`next_cursor` of the previous page.")
@json_option
@user_errors
def notification_deliveries(
    workspace_id: int, endpoint_id: int, status: str | None, limit: int, cursor: int | None, as_json: bool
) -> None:
    """An endpoint's deliveries, newest first: how each went, and its webhook-id."""
    with open_sessions(load_settings())() as session:
        rows, next_id = notifications.list_deliveries(
            session, workspace_id=workspace_id, endpoint_id=endpoint_id, status=status, limit=limit, before_id=cursor
        )
        page = NotificationDeliveryPage(
            deliveries=[NotificationDeliveryOut.of(delivery) for delivery in rows],
            next_cursor=None if next_id is None else str(next_id),
        )
    lines = [describe_delivery(shown) for shown in page.deliveries]
    if page.next_cursor:
        lines.append(f"more: --cursor {page.next_cursor}")
    emit(as_json, page, "\n".join(lines) or f"notification endpoint {endpoint_id} has no deliveries")


@click.command("redrive")
@endpoint_ref
@click.option(
    "--delivery",
    "delivery_ids",
    multiple=True,
    type=ID,
    help="A delivery to send again, whatever its status; repeat. Without it, every failed delivery of the endpoint.",
)
@json_option
@user_errors
def notification_redrive(workspace_id: int, endpoint_id: int, delivery_ids: tuple[int, ...], as_json: bool) -> None:
    """Send deliveries again under their webhook-ids, from the start of the retry schedule."""
    with transaction(open_sessions(load_settings())) as session:
        count = notifications.redrive(
            session, workspace_id=workspace_id, endpoint_id=endpoint_id, delivery_ids=list(delivery_ids) or None
        )
    emit(
        as_json,
        RedriveOut(redriven=count),
        f"notification endpoint {endpoint_id}: {plural(count, 'delivery', 'deliveries')} queued again; "
        "the notification_sender sensor sends them on its next tick",
    )
