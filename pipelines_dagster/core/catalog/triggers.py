"""A pipeline's triggers as configured: its schedule, manual, webhook and event triggers, made, listed
and switched.

A webhook trigger is named by a random token in its URL; only the token's hash is stored. How its
deliveries are signed and checked is the intake's (`core.triggers.webhooks`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import refused_as_sequential
from pipelines_dagster.app_db.models import PipelineTrigger, TriggerKind, WebhookSigning
from pipelines_dagster.core.catalog.event_types import validate_event_type
from pipelines_dagster.core.catalog.pipelines import SystemManagedError, get_pipeline
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.errors import InvalidInputError, NotFoundError
from pipelines_dagster.core.security.signing import (
    DEFAULT_ROTATION_OVERLAP_SECONDS,
    first_secrets,
    new_signing_secret,
    rotate,
    validate_overlap,
)
from pipelines_dagster.core.security.tokens import hash_token, new_token
from pipelines_dagster.core.validation import validate_choice

WEBHOOK_TOKEN_PREFIX = "whk_"


@dataclass(frozen=True)
class NewWebhook:
    trigger: PipelineTrigger
    token: str
    """Shown once: the URL is /webhooks/{token}."""
    secret: str
    """Shown once: the signing key, a whsec_ secret in standard mode and the token itself in github mode."""


def create_webhook_trigger(
    session: Session, *, workspace_id: int, pipeline_id: int, signing: str = WebhookSigning.STANDARD.value
) -> NewWebhook:
    mode = validate_choice(WebhookSigning, signing, field="signing", what="signing mode")
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    token = new_token(WEBHOOK_TOKEN_PREFIX)
    secret = new_signing_secret() if mode is WebhookSigning.STANDARD else token
    trigger = PipelineTrigger(
        workspace_id=workspace_id,
        pipeline_id=pipeline_id,
        kind=TriggerKind.WEBHOOK.value,
        webhook_secret_hash=hash_token(token),
        signing=mode.value,
        signing_secrets=first_secrets(secret) if mode is WebhookSigning.STANDARD else None,
    )
    return NewWebhook(_add_once(session, trigger), token, secret)


@dataclass(frozen=True)
class RotatedSecret:
    trigger: PipelineTrigger
    secret: str
    """Shown once: the new signing secret."""
    previous_expires_at: datetime
    """Until then the previous secrets verify too."""


def rotate_signing_secret(
    session: Session,
    *,
    workspace_id: int,
    pipeline_id: int,
    trigger_id: int,
    overlap_seconds: int = DEFAULT_ROTATION_OVERLAP_SECONDS,
    now: datetime | None = None,
) -> RotatedSecret:
    """Give a standard-mode trigger a new secret; the ones it had verify for `overlap_seconds` more."""
    validate_overlap(overlap_seconds)
    trigger = get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id)
    if trigger.signing != WebhookSigning.STANDARD.value:
        raise InvalidInputError(
            "signing",
            "only a standard-mode webhook trigger has a secret to rotate; a github-mode trigger signs with its "
            "URL token, so replace it with a new trigger",
        )
    secret, trigger.signing_secrets, expires_at = rotate(
        trigger.signing_secrets, overlap_seconds=overlap_seconds, now=now or datetime.now(UTC)
    )
    session.flush()
    return RotatedSecret(trigger, secret, expires_at)


def get_trigger(session: Session, *, workspace_id: int, pipeline_id: int, trigger_id: int) -> PipelineTrigger:
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    trigger = session.get(PipelineTrigger, trigger_id)
    if trigger is None or trigger.pipeline_id != pipeline_id:
        raise NotFoundError(f"trigger {trigger_id} is not a trigger of pipeline {pipeline_id}")
    return trigger


USER_DISABLED_REASON = "switched off by a user"


def pipeline_triggers(session: Session, *, workspace_id: int, pipeline_id: int) -> list[PipelineTrigger]:
    """A pipeline's triggers, oldest first."""
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    return list(
        session.scalars(
            sa.select(PipelineTrigger).where(PipelineTrigger.pipeline_id == pipeline_id).order_by(PipelineTrigger.id)
        )
    )


def set_trigger_enabled(
    session: Session,
    *,
    workspace_id: int,
    pipeline_id: int,
    trigger_id: int,
    enabled: bool,
    now: datetime | None = None,
) -> PipelineTrigger:
    """Switch one trigger on or off; a schedule switched on is due next at its next fire time from now.

    A trigger of a disabled pipeline may be switched on: it fires into nothing until the pipeline is
    enabled (the pipeline is the switch). The connector's own periodic indexing follows the
    de-dup guard, not this.
    """
    trigger = get_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id)
    if trigger.pipeline.system_managed:
        raise SystemManagedError(
            f"pipeline {pipeline_id} is a connector's own periodic indexing; its schedule follows the de-dup guard"
        )
    if enabled == trigger.enabled:
        return trigger
    next_fire_at = None
    if enabled and trigger.kind == TriggerKind.SCHEDULE.value:
        spec = ScheduleSpec.of(trigger).validated()
        next_fire_at = spec.next_fire_after(now or datetime.now(UTC))
    trigger.enabled, trigger.next_fire_at = enabled, next_fire_at
    trigger.disabled_reason = None if enabled else USER_DISABLED_REASON
    session.flush()
    return trigger


def create_event_trigger(session: Session, *, workspace_id: int, pipeline_id: int, event_type: str) -> PipelineTrigger:
    """Subscribe a pipeline to an event type; an unknown type is refused here, not silently never fired."""
    kind = validate_event_type(event_type)
    get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    trigger = PipelineTrigger(
        workspace_id=workspace_id, pipeline_id=pipeline_id, kind=TriggerKind.EVENT.value, event_type=kind.value
    )
    return _add_once(session, trigger)


def create_manual_trigger(session: Session, *, workspace_id: int, pipeline_id: int) -> PipelineTrigger:
    """Give a pipeline its manual trigger, on: what lets it be run by hand (pipelines get one when they
    are made; one whose trigger was deleted, or made before that, gets it back here)."""
    pipeline = get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    return _add_once(session, PipelineTrigger.manual_of(pipeline))


def _add_once(session: Session, trigger: PipelineTrigger) -> PipelineTrigger:
    """Add a new trigger, refused when its pipeline has one of its kind (and event type) already: one made
    before, or one a concurrent request made first."""

    def refuse_duplicate() -> None:
        exists = session.scalar(
            sa.select(PipelineTrigger.id).where(
                PipelineTrigger.pipeline_id == trigger.pipeline_id,
                PipelineTrigger.kind == trigger.kind,
                PipelineTrigger.event_type.is_(None)
                if trigger.event_type is None
                else PipelineTrigger.event_type == trigger.event_type,
            )
        )
        if exists:
            what = f"an event trigger for {trigger.event_type}" if trigger.event_type else f"a {trigger.kind} trigger"
            raise InvalidInputError("kind", f"pipeline {trigger.pipeline_id} already has {what}")

    refuse_duplicate()
    with refused_as_sequential(session, refuse_duplicate):
        session.add(trigger)
    return trigger
