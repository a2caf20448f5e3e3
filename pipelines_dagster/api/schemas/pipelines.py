"""A pipeline's bodies: what creates and changes it (per-field rules from the catalog's own validators), and
how it, its schedule and its retry policy are shown."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from pipelines_dagster.api.schemas.common import MAX_URLS, EveryMinutes, Name, RequestBody
from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger
from pipelines_dagster.core.catalog.connectors import initial_urls
from pipelines_dagster.core.catalog.pipelines import PipelineChanges, is_runnable
from pipelines_dagster.core.catalog.retry import (
    DEFAULT_BACKOFF,
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_RETRIES,
    MAX_DELAY_SECONDS,
    MAX_RETRIES,
    MIN_DELAY_SECONDS,
    RetryPolicy,
    validate_retry_policy,
)
from pipelines_dagster.core.catalog.schedules import ScheduleSpec, validate_cron, validate_timezone
from pipelines_dagster.core.catalog.templates import disabled_reason, template_key
from pipelines_dagster.core.validation import (
    MAX_RUNTIME_SECONDS,
    MIN_RUNTIME_SECONDS,
    QUEUE_NAME_PATTERN,
    RESERVED_QUEUE_PREFIX,
    Id,
    field_rule,
    validate_name,
    validate_queue_name,
    validate_urls,
)


def _timezone(name: str) -> str:
    validate_timezone(name)
    return name


FolderName = Annotated[
    str,
    Field(min_length=1, max_length=255, description="A KB folder at the root, created when missing."),
    field_rule(lambda name: validate_name(name, field="folder", max_length=255)),
]
Urls = Annotated[
    list[str],
    Field(
        min_length=1,
        max_length=MAX_URLS,
        description="URLs this pipeline crawls instead of its connector's (absolute http or https).",
    ),
    field_rule(validate_urls),
]
Cron = Annotated[
    str,
    Field(max_length=120, description="Five fields: minute hour day month weekday.", examples=["30 2 * * *"]),
    field_rule(validate_cron),
]
Timezone = Annotated[
    str,
    Field(max_length=64, description="IANA name of the cron's timezone.", examples=["Europe/Stockholm"]),
    field_rule(_timezone),
]
MaxRuntime = Annotated[
    int,
    Field(
        ge=MIN_RUNTIME_SECONDS,
        le=MAX_RUNTIME_SECONDS,
        strict=True,
        description="Seconds one run may take. A crawl past it is stopped and continued by a new run from the "
        "pages it stored (up to 3 times), so a long polite crawl finishes across runs.",
        examples=[14400],
    ),
]
WORKER_QUEUE = (
    "The Celery queue its runs go to under the Celery profile (deploy/dagster.celery.yaml); null: the launcher's "
    "default queue. Workers take a queue with `pipelines-dagster worker --queue NAME`."
)
WorkerQueue = Annotated[
    str,
    Field(
        description=WORKER_QUEUE,
        examples=["site-crawls"],
        # The rule for clients to read; the validator below answers with what to fix.
        json_schema_extra={"pattern": f"^(?!{re.escape(RESERVED_QUEUE_PREFIX)}){QUEUE_NAME_PATTERN}$"},
    ),
    field_rule(validate_queue_name),
]


class Schedule(RequestBody):
    """A cron expression with its timezone, or a fixed interval."""

    cron: Cron | None = None
    timezone: Timezone | None = None
    every_minutes: EveryMinutes | None = None

    def spec(self) -> ScheduleSpec:
        return ScheduleSpec(cron=self.cron, timezone=self.timezone, every_minutes=self.every_minutes)


class RetryPolicyIn(RequestBody):
    """How a failed crawl is retried: retry n waits delay_seconds × n (linear) or × 2^(n-1) (exponential)."""

    backoff: Literal["linear", "exponential"] = DEFAULT_BACKOFF.value
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0, le=MAX_RETRIES)
    delay_seconds: float = Field(
        default=DEFAULT_DELAY_SECONDS, ge=MIN_DELAY_SECONDS, le=MAX_DELAY_SECONDS, allow_inf_nan=False
    )

    def policy(self) -> RetryPolicy:
        return validate_retry_policy(
            backoff=self.backoff, max_retries=self.max_retries, delay_seconds=self.delay_seconds
        )


class RetryPolicyOut(BaseModel):
    backoff: str
    max_retries: int
    delay_seconds: float
    description: str = Field(description="The policy in words, with the first waits.")

    @classmethod
    def of(cls, policy: RetryPolicy) -> RetryPolicyOut:
        return cls(
            backoff=policy.backoff.value,
            max_retries=policy.max_retries,
            delay_seconds=policy.delay_seconds,
            description=policy.describe(),
        )


class PipelineCreate(RequestBody):
    name: Name
    connector_id: Id = Field(description="A connector of the same workspace.")
    save_to_kb: bool = Field(default=True, description="Save pages as KB documents, or keep only the raw crawl.")
    folder: FolderName | None = None
    folder_id: Id | None = Field(default=None, description="A folder of the same workspace; give this or folder.")
    schedule: Schedule | None = None
    enabled: bool = True
    urls: Urls | None = None
    retry_policy: RetryPolicyIn | None = Field(default=None, description="Default: exponential, 3 retries, 2 s.")
    max_runtime_seconds: MaxRuntime | None = None
    worker_queue: WorkerQueue | None = None


class PipelineChange(RequestBody):
    """A body that changes a pipeline: PATCH's some fields, PUT's all."""

    def changes(self) -> PipelineChanges:
        """The catalog's changes: a field left out of the body keeps its value (PUT leaves none out)."""
        given = {name: getattr(self, name) for name in self.model_fields_set}
        if given.get("schedule") is not None:
            given["schedule"] = given["schedule"].spec()
        if "retry_policy" in given:
            given["retry"] = given.pop("retry_policy").policy()
        return PipelineChanges(**given)


class PipelineUpdate(PipelineChange):
    """Only the fields given change; null clears folder, folder_id, schedule and urls."""

    # Null is not a value of these, so it is refused rather than read as "leave unchanged". Not unions with
    # None (their errors would be reported under each member's name, `enabled.bool` and `enabled.none`): a
    # null is refused by the validator below, and a left-out field keeps its default, which is not validated.
    name: Name = None  # type: ignore[assignment]
    save_to_kb: bool = None  # type: ignore[assignment]
    enabled: bool = None  # type: ignore[assignment]
    connector_id: Id = Field(  # type: ignore[assignment]
        default=None, description="The connector it crawls: how a seeded template is given one."
    )
    folder: FolderName | None = None
    folder_id: Id | None = None
    schedule: Schedule | None = None
    urls: Urls | None = None
    retry_policy: RetryPolicyIn = None  # type: ignore[assignment]
    max_runtime_seconds: MaxRuntime | None = Field(default=None, description="Null: the deployment's maximum runtime.")
    worker_queue: WorkerQueue | None = None

    @field_validator("name", "save_to_kb", "enabled", "connector_id", "retry_policy", mode="before")
    @classmethod
    def _refuse_null(cls, value: Any) -> Any:
        if value is None:
            raise PydanticCustomError("not_null", "must not be null; leave the field out to keep its value")
        return value


class PipelineReplace(PipelineChange):
    """The whole pipeline, as `PUT` replaces it: every field is required; null is the root folder, no schedule, the
    connector's URLs, the deployment's maximum runtime and the launcher's default queue. PATCH changes only the
    fields it is given."""

    name: Name
    connector_id: Id = Field(description="The connector it crawls.")
    save_to_kb: bool
    enabled: bool
    folder_id: Id | None = Field(description="Destination KB folder of the same workspace; null is the root.")
    schedule: Schedule | None
    urls: Urls | None
    retry_policy: RetryPolicyIn
    max_runtime_seconds: MaxRuntime | None
    worker_queue: WorkerQueue | None


class ScheduleOut(BaseModel):
    cron: str | None
    timezone: str | None
    every_minutes: int | None
    enabled: bool
    next_fire_at: datetime | None
    disabled_reason: str | None

    @classmethod
    def of(cls, trigger: PipelineTrigger) -> ScheduleOut:
        return cls(
            cron=trigger.cron,
            timezone=trigger.timezone,
            every_minutes=trigger.interval_minutes,
            enabled=trigger.enabled,
            next_fire_at=trigger.next_fire_at,
            disabled_reason=trigger.disabled_reason,
        )


class PipelineOut(BaseModel):
    id: int
    workspace_id: int
    connector_id: int | None
    name: str
    save_to_kb: bool
    folder_id: int | None = Field(description="Destination KB folder; null is the workspace root.")
    enabled: bool
    disabled_reason: str | None = Field(description="Why it does not run, when disabled; null when enabled.")
    template: str | None = Field(description="The built-in template it was seeded from; null for a user's own.")
    system_managed: bool = Field(description="The connector's own periodic indexing; follows the connector.")
    urls: list[str] | None = Field(description="This pipeline's own URLs; null crawls the connector's.")
    schedule: ScheduleOut | None
    retry_policy: RetryPolicyOut
    max_runtime_seconds: int | None = Field(
        description="How long one run may take before it is stopped and continued; null: the deployment's."
    )
    worker_queue: str | None = Field(description=WORKER_QUEUE)
    partition_key: str | None = Field(
        description="Its partition of the Dagster assets (crawl_results ...), the key to pick in the Dagster UI's "
        "Materialize dialog; null while it cannot run (disabled, or no connector)."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, pipeline: Pipeline, schedule: PipelineTrigger | None) -> PipelineOut:
        return cls(
            id=pipeline.id,
            workspace_id=pipeline.workspace_id,
            connector_id=pipeline.connector_id,
            name=pipeline.name,
            save_to_kb=pipeline.save_to_kb,
            folder_id=pipeline.destination_folder_id,
            enabled=pipeline.enabled,
            disabled_reason=disabled_reason(pipeline),
            template=template_key(pipeline),
            system_managed=pipeline.system_managed,
            urls=initial_urls(pipeline),
            schedule=None if schedule is None else ScheduleOut.of(schedule),
            retry_policy=RetryPolicyOut.of(RetryPolicy.of(pipeline)),
            max_runtime_seconds=pipeline.max_runtime_seconds,
            worker_queue=pipeline.worker_queue,
            partition_key=pipeline.partition if is_runnable(pipeline) else None,
            created_at=pipeline.created_at,
            updated_at=pipeline.updated_at,
        )


class PipelineList(BaseModel):
    pipelines: list[PipelineOut]

    @classmethod
    def of(cls, pipelines: list[Pipeline], schedules: dict[int, PipelineTrigger]) -> PipelineList:
        return cls(pipelines=[PipelineOut.of(pipeline, schedules.get(pipeline.id)) for pipeline in pipelines])
