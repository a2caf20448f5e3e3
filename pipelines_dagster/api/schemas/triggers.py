"""A pipeline's triggers: what adds one, how one is shown (a new webhook's secret once), and what a signed
webhook delivery is answered with."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from pipelines_dagster.api.schemas.common import RequestBody
from pipelines_dagster.app_db.models import PipelineTrigger, TriggerKind, WebhookSigning
from pipelines_dagster.core.catalog.event_types import EventType
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.catalog.triggers import NewWebhook, RotatedSecret
from pipelines_dagster.core.security.signing import (
    DEFAULT_ROTATION_OVERLAP_SECONDS,
    MAX_ROTATION_OVERLAP_SECONDS,
    previous_secret_expiry,
)


class TriggerIn(RequestBody):
    kind: Literal["webhook", "event", "manual"] = Field(
        description="Schedules are set on the pipeline itself. A pipeline runs by hand (`POST .../run`) only "
        "while it has an enabled manual trigger; it gets one when it is made, and `manual` adds one it lacks."
    )
    event_type: EventType | None = Field(default=None, strict=False, description="Required for an event trigger.")
    signing: WebhookSigning | None = Field(
        default=None,
        strict=False,
        description="How a webhook trigger's deliveries are signed (webhook triggers only; default `standard`). "
        "`standard`: Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) under a whsec_ secret, "
        "replays refused by id and time. `github`: X-Hub-Signature-256 over the body under the URL token, as "
        "GitHub sends; a body already accepted is a replay, so a sender that must repeat a payload uses `standard`.",
    )


class TriggerOut(BaseModel):
    id: int
    pipeline_id: int
    kind: str
    event_type: str | None
    signing: str | None = Field(description="A webhook trigger's signing mode; null for other kinds.")
    previous_secret_expires_at: datetime | None = Field(
        description="After a secret rotation: until when the previous secret still verifies."
    )
    schedule: str | None = Field(default=None, description="A schedule trigger's schedule, in words.")
    next_fire_at: datetime | None = Field(default=None, description="When an enabled schedule trigger fires next.")
    enabled: bool
    disabled_reason: str | None

    @classmethod
    def of(cls, trigger: PipelineTrigger) -> TriggerOut:
        schedule = trigger.kind == TriggerKind.SCHEDULE.value
        return cls(
            id=trigger.id,
            pipeline_id=trigger.pipeline_id,
            kind=trigger.kind,
            event_type=trigger.event_type,
            signing=trigger.signing,
            previous_secret_expires_at=previous_secret_expiry(trigger.signing_secrets, datetime.now(UTC)),
            schedule=ScheduleSpec.of(trigger).describe() if schedule else None,
            next_fire_at=trigger.next_fire_at if schedule else None,
            enabled=trigger.enabled,
            disabled_reason=trigger.disabled_reason,
        )


class NewWebhookOut(TriggerOut):
    webhook_path: str = Field(description="POST deliveries here; shown once.")
    secret: str = Field(
        description="Shown once. Standard mode: the whsec_ signing secret. Github mode: the URL token, "
        "which is the HMAC key of X-Hub-Signature-256."
    )

    @classmethod
    def of_new(cls, made: NewWebhook) -> NewWebhookOut:
        shown = TriggerOut.of(made.trigger).model_dump()
        return cls(**shown, webhook_path=f"/webhooks/{made.token}", secret=made.secret)


class RotateIn(RequestBody):
    overlap_seconds: int = Field(
        default=DEFAULT_ROTATION_OVERLAP_SECONDS,
        ge=0,
        le=MAX_ROTATION_OVERLAP_SECONDS,
        description="How long the secrets the trigger had until now keep verifying.",
    )


class RotatedOut(TriggerOut):
    secret: str = Field(description="The new whsec_ signing secret; shown once.")

    @classmethod
    def of_rotated(cls, rotated: RotatedSecret) -> RotatedOut:
        return cls(**TriggerOut.of(rotated.trigger).model_dump(), secret=rotated.secret)


class TriggerList(BaseModel):
    triggers: list[TriggerOut]


class DeliveryOut(BaseModel):
    delivery_id: int
    duplicate: bool = Field(description="True for a redelivery: stored once, no second run.")
