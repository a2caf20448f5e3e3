"""`pipelines-dagster notification`: a workspace's notification endpoints, their secrets and their state."""

from __future__ import annotations

import click

from pipelines_dagster.api.schemas.common import DeletedOut
from pipelines_dagster.api.schemas.notifications import EndpointList, EndpointOut, NewEndpointOut, RotatedEndpointOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import NotificationEndpoint
from pipelines_dagster.cli.common import (
    ID,
    Group,
    RenamedOption,
    emit,
    endpoint_ref,
    json_option,
    open_sessions,
    user_errors,
)
from pipelines_dagster.cli.deliveries import (
    destination_guard,
    notification_deliveries,
    notification_redrive,
    notification_test,
)
from pipelines_dagster.core.security.signing import DEFAULT_ROTATION_OVERLAP_SECONDS
from pipelines_dagster.notifications import endpoints as notifications
from pipelines_dagster.notifications.payloads import NotificationEvent
from pipelines_dagster.settings import load_settings


@click.group(cls=Group)
def notification() -> None:
    """Notification endpoints: URLs that hear, as signed Standard Webhooks, of runs ending, pages
    changing and credit running low."""


def describe_endpoint(shown: EndpointOut) -> str:
    """One line per endpoint: id, URL, state, what it hears of."""
    state = "enabled" if shown.enabled else f"disabled ({shown.disabled_reason})"
    pipelines = (
        "all pipelines"
        if shown.pipeline_ids is None
        else "pipelines " + ", ".join(str(pipeline_id) for pipeline_id in shown.pipeline_ids)
    )
    credits = f", credits below {shown.credits_below_micros} micros" if shown.credits_below_micros is not None else ""
    label = f"\t{shown.description}" if shown.description else ""
    return f"{shown.id}\t{shown.url}\t{state}\t{', '.join(shown.event_types)} of {pipelines}{credits}{label}"


def show_endpoint(endpoint: NotificationEndpoint, as_json: bool) -> None:
    shown = EndpointOut.of(endpoint)
    emit(as_json, shown, describe_endpoint(shown))


@notification.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--url", required=True, help="Where to POST: an http(s) URL the crawler may reach.")
@click.option(
    "--event-type",
    "event_types",
    cls=RenamedOption,
    formerly="--event",
    multiple=True,
    help="An event to hear of; repeat for more. One of: " + ", ".join(member.value for member in NotificationEvent),
)
@click.option("--pipeline", "pipeline_ids", multiple=True, type=ID, help="Only this pipeline's events; repeat.")
@click.option(
    "--credits-below-micros",
    cls=RenamedOption,
    formerly="--credits-below",
    type=int,
    default=None,
    help="With credits.low, and only then: notify when a charge takes the balance under this many micro-credits.",
)
@click.option("--description", default=None, help="What the endpoint is for.")
@json_option
@user_errors
def notification_create(
    workspace_id: int,
    url: str,
    event_types: tuple[str, ...],
    pipeline_ids: tuple[int, ...],
    credits_below_micros: int | None,
    description: str | None,
    as_json: bool,
) -> None:
    """Add a notification endpoint and print the secret its deliveries are signed with (shown once)."""
    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        made = notifications.create_endpoint(
            session,
            destination_guard(settings),
            workspace_id=workspace_id,
            url=url,
            event_types=event_types,
            pipeline_ids=list(pipeline_ids) or None,
            credits_below_micros=credits_below_micros,
            description=description,
        )
        shown = NewEndpointOut.of_new(made)
    emit(
        as_json,
        shown,
        f"notification endpoint {shown.id} created: {', '.join(shown.event_types)} to {shown.url}\n"
        "deliveries carry webhook-id, webhook-timestamp and webhook-signature (Standard Webhooks), "
        f"signed with {shown.secret} (shown once, store it now)",
    )


@notification.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def notification_list(workspace_id: int, as_json: bool) -> None:
    """The workspace's notification endpoints."""
    with open_sessions(load_settings())() as session:
        listed = EndpointList(
            endpoints=[
                EndpointOut.of(endpoint)
                for endpoint in notifications.list_endpoints(session, workspace_id=workspace_id)
            ]
        )
    text = "\n".join(describe_endpoint(shown) for shown in listed.endpoints)
    emit(
        as_json,
        listed,
        text or f"workspace {workspace_id} has no notification endpoints",
    )


@notification.command("show")
@endpoint_ref
@json_option
@user_errors
def notification_show(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """One notification endpoint: its URL, state and subscriptions."""
    with open_sessions(load_settings())() as session:
        show_endpoint(notifications.get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id), as_json)


@notification.command("delete")
@endpoint_ref
@json_option
@user_errors
def notification_delete(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Delete a notification endpoint with its deliveries and their log."""
    with transaction(open_sessions(load_settings())) as session:
        notifications.delete_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    emit(as_json, DeletedOut(id=endpoint_id, deleted=True), f"notification endpoint {endpoint_id} deleted")


@notification.command("rotate-secret")
@endpoint_ref
@click.option(
    "--overlap-seconds",
    default=DEFAULT_ROTATION_OVERLAP_SECONDS,
    show_default=True,
    type=int,
    help="How long deliveries are signed with the current secret too, next to the new one.",
)
@json_option
@user_errors
def notification_rotate_secret(workspace_id: int, endpoint_id: int, overlap_seconds: int, as_json: bool) -> None:
    """Give a notification endpoint a new signing secret (printed once)."""
    with transaction(open_sessions(load_settings())) as session:
        rotated = notifications.rotate_endpoint_secret(
            session, workspace_id=workspace_id, endpoint_id=endpoint_id, overlap_seconds=overlap_seconds
        )
        shown = RotatedEndpointOut.of_rotated(rotated)
    previous = (
        f"deliveries are signed with the previous secret too until {shown.previous_secret_expires_at.isoformat()}"
        if shown.previous_secret_expires_at
        else "the previous secret signs no more"
    )
    emit(
        as_json,
        shown,
        f"notification endpoint {endpoint_id}: new secret {shown.secret} (shown once); {previous}",
    )


def _set_endpoint_enabled(workspace_id: int, endpoint_id: int, enabled: bool, as_json: bool) -> None:
    with transaction(open_sessions(load_settings())) as session:
        show_endpoint(
            notifications.set_endpoint_enabled(
                session, workspace_id=workspace_id, endpoint_id=endpoint_id, enabled=enabled
            ),
            as_json,
        )


@notification.command("enable")
@endpoint_ref
@json_option
@user_errors
def notification_enable(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Switch a notification endpoint on again (its failure streak starts over); redrive what failed meanwhile."""
    _set_endpoint_enabled(workspace_id, endpoint_id, True, as_json)


@notification.command("disable")
@endpoint_ref
@json_option
@user_errors
def notification_disable(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Switch a notification endpoint off: nothing is queued to it, and its pending deliveries fail."""
    _set_endpoint_enabled(workspace_id, endpoint_id, False, as_json)


# An endpoint's deliveries have their module (deliveries.py); they are commands of this group all the same.
for command in (notification_test, notification_deliveries, notification_redrive):
    notification.add_command(command)
