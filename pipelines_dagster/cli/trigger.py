"""`pipelines-dagster trigger` and `event`: a pipeline's webhook, event and manual triggers, and the domain events
that fire them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from pipelines_dagster.api.schemas.common import DeletedOut
from pipelines_dagster.api.schemas.events import EventOut
from pipelines_dagster.api.schemas.triggers import NewWebhookOut, RotatedOut, TriggerList, TriggerOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.cli.common import ID, Group, RenamedOption, emit, json_option, open_sessions, user_errors
from pipelines_dagster.core.catalog.event_types import EventType
from pipelines_dagster.core.catalog.triggers import (
    create_event_trigger,
    create_manual_trigger,
    create_webhook_trigger,
    get_trigger,
    pipeline_triggers,
    rotate_signing_secret,
    set_trigger_enabled,
)
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.security.signing import DEFAULT_ROTATION_OVERLAP_SECONDS
from pipelines_dagster.core.triggers.events import emit_event
from pipelines_dagster.settings import load_settings


@click.group(cls=Group)
def trigger() -> None:
    """Webhook, event and manual triggers of a pipeline (schedules are set with `pipeline create`)."""


@trigger.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", required=True, type=ID)
@click.option(
    "--kind",
    required=True,
    type=click.Choice(["webhook", "event", "manual"]),
    help="manual: the trigger that lets `pipeline run` (and POST .../run) start the pipeline by hand; a pipeline "
    "gets one when it is made, so this adds one it lacks.",
)
@click.option(
    "--event-type",
    default=None,
    help="For --kind event, one of: " + ", ".join(member.value for member in EventType) + ".",
)
@click.option(
    "--signing",
    default=None,
    help="For --kind webhook: standard (Standard Webhooks, the default) or github (X-Hub-Signature-256 "
    "over the body, as GitHub sends; a repeated body is refused as a replay).",
)
@json_option
@user_errors
def trigger_create(
    workspace_id: int, pipeline_id: int, kind: str, event_type: str | None, signing: str | None, as_json: bool
) -> None:
    """Add a webhook trigger (prints its URL path and secret once), an event subscription or a manual trigger."""
    if (kind == "event") != (event_type is not None):
        raise InvalidInputError("event_type", "give --event-type with --kind event, and only then")
    if kind != "webhook" and signing is not None:
        raise InvalidInputError("signing", "give --signing with --kind webhook only")
    with transaction(open_sessions(load_settings())) as session:
        if kind == "manual":
            shown: TriggerOut = TriggerOut.of(
                create_manual_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
            )
            text = f"manual trigger {shown.id}: pipeline {pipeline_id} can be run by hand (`pipeline run`)"
        elif kind == "webhook":
            made = create_webhook_trigger(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, signing=signing or "standard"
            )
            shown = NewWebhookOut.of_new(made)
            how = (
                "headers webhook-id, webhook-timestamp and webhook-signature: v1,base64(HMAC-SHA256("
                f'"{{id}}.{{timestamp}}.{{body}}", {made.secret}))'
                if made.trigger.signing == "standard"
                else f"X-Hub-Signature-256: sha256=HMAC-SHA256(body, {made.secret})"
            )
            text = (
                f"webhook trigger {made.trigger.id} ({made.trigger.signing} signing): "
                f"POST /webhooks/{made.token}\nsign each delivery: {how} (shown once)"
            )
        else:
            assert event_type is not None  # checked against --kind above
            subscribed = create_event_trigger(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, event_type=event_type
            )
            shown = TriggerOut.of(subscribed)
            text = f"event trigger {subscribed.id}: pipeline {pipeline_id} runs on {subscribed.event_type}"
    emit(as_json, shown, text)


@trigger.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", required=True, type=ID)
@json_option
@user_errors
def trigger_list(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """A pipeline's triggers: its schedule, webhooks and event subscriptions, on or off."""
    with open_sessions(load_settings())() as session:
        shown = TriggerList(
            triggers=[
                TriggerOut.of(row)
                for row in pipeline_triggers(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
            ]
        )
    emit(as_json, shown, "\n".join(trigger_line(one) for one in shown.triggers))


def trigger_line(shown: TriggerOut) -> str:
    what = shown.schedule or shown.event_type or shown.signing or ""
    if shown.enabled:
        state = f"on, next {shown.next_fire_at.isoformat()}" if shown.next_fire_at else "on"
    else:
        state = f"off ({shown.disabled_reason})" if shown.disabled_reason else "off"
    return f"{shown.id}\t{shown.kind}\t{what}\t{state}"


def _switch_trigger(workspace_id: int, pipeline_id: int, trigger_id: int, enabled: bool, as_json: bool) -> None:
    with transaction(open_sessions(load_settings())) as session:
        shown = TriggerOut.of(
            set_trigger_enabled(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id, enabled=enabled
            )
        )
    emit(as_json, shown, trigger_line(shown))


def trigger_ref(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--workspace", "workspace_id", required=True, type=ID),
            click.option("--pipeline", "pipeline_id", required=True, type=ID),
            click.option("--trigger", "trigger_id", required=True, type=ID),
        ]
    ):
        command = option(command)
    return command


@trigger.command("enable")
@trigger_ref
@json_option
@user_errors
def trigger_enable(workspace_id: int, pipeline_id: int, trigger_id: int, as_json: bool) -> None:
    """Switch a trigger on (a template's schedule is seeded off); a schedule fires next at its next time.
    A trigger of a disabled pipeline fires into nothing until the pipeline is enabled."""
    _switch_trigger(workspace_id, pipeline_id, trigger_id, True, as_json)


@trigger.command("disable")
@trigger_ref
@json_option
@user_errors
def trigger_disable(workspace_id: int, pipeline_id: int, trigger_id: int, as_json: bool) -> None:
    """Switch a trigger off: it fires no more until enabled again (a manual trigger off: `pipeline run` refuses)."""
    _switch_trigger(workspace_id, pipeline_id, trigger_id, False, as_json)


@trigger.command("show")
@trigger_ref
@json_option
@user_errors
def trigger_show(workspace_id: int, pipeline_id: int, trigger_id: int, as_json: bool) -> None:
    """One trigger of a pipeline, as `GET .../triggers/{id}` shows it: its kind, what it fires on, on or off."""
    with open_sessions(load_settings())() as session:
        shown = TriggerOut.of(
            get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id)
        )
    emit(as_json, shown, trigger_line(shown))


@trigger.command("delete")
@trigger_ref
@json_option
@user_errors
def trigger_delete(workspace_id: int, pipeline_id: int, trigger_id: int, as_json: bool) -> None:
    """Delete a trigger, as `DELETE .../triggers/{id}` does: a webhook's URL is refused from then on (to stop
    one for a while, `trigger disable`); without its manual trigger a pipeline cannot be run by hand."""
    with transaction(open_sessions(load_settings())) as session:
        session.delete(get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id))
    emit(as_json, DeletedOut(id=trigger_id, deleted=True), f"trigger {trigger_id} deleted")


@trigger.command("rotate-secret")
@trigger_ref
@click.option(
    "--overlap-seconds",
    default=DEFAULT_ROTATION_OVERLAP_SECONDS,
    show_default=True,
    type=int,
    help="How long the current secret keeps verifying next to the new one.",
)
@json_option
@user_errors
def trigger_rotate_secret(
    workspace_id: int, pipeline_id: int, trigger_id: int, overlap_seconds: int, as_json: bool
) -> None:
    """Give a standard-mode webhook trigger a new signing secret (printed once)."""
    with transaction(open_sessions(load_settings())) as session:
        rotated = rotate_signing_secret(
            session,
            workspace_id=workspace_id,
            pipeline_id=pipeline_id,
            trigger_id=trigger_id,
            overlap_seconds=overlap_seconds,
        )
        shown = RotatedOut.of_rotated(rotated)
    emit(
        as_json,
        shown,
        f"trigger {trigger_id}: new secret {rotated.secret} (shown once); "
        f"the previous one verifies until {rotated.previous_expires_at.isoformat()}",
    )


@click.group(cls=Group)
def event() -> None:
    """Domain events: what happened in a workspace, for event triggers to act on."""


@event.command("emit")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option(
    "--event-type",
    cls=RenamedOption,
    formerly="--type",
    required=True,
    help="One of: " + ", ".join(m.value for m in EventType) + ".",
)
@click.option("--payload", default="{}", help="A JSON object, e.g. '{\"connector_id\": 3}'.")
@json_option
@user_errors
def event_emit(workspace_id: int, event_type: str, payload: str, as_json: bool) -> None:
    """Record a domain event; subscribed pipelines run on the event sensor's next tick."""
    try:
        body = json.loads(payload)
    except ValueError as exc:
        raise InvalidInputError("payload", f"not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise InvalidInputError("payload", "must be a JSON object")
    with transaction(open_sessions(load_settings())) as session:
        recorded = emit_event(session, workspace_id=workspace_id, event_type=event_type, payload=body)
        shown = EventOut(event_id=recorded.id, event_type=recorded.event_type)
    emit(as_json, shown, f"event {shown.event_id} recorded")
