"""Request and response bodies of the HTTP API; per-field rules come from the catalog's own validators."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from pipelines_dagster.app_db.models import Connector, Pipeline, PipelineTrigger
from pipelines_dagster.core.catalog import PipelineChanges, initial_urls, template_key
from pipelines_dagster.core.document_list import DocumentView
from pipelines_dagster.core.retry import (
    DEFAULT_BACKOFF,
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_RETRIES,
    MAX_DELAY_SECONDS,
    MAX_RETRIES,
    RetryPolicy,
    validate_retry_policy,
)
from pipelines_dagster.core.schedule import ScheduleSpec, validate_cron, validate_timezone
from pipelines_dagster.core.site_config import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGES,
    MAX_DEPTH,
    MAX_PATTERNS,
    SITE_KEY,
    SiteConfig,
    crawl_mode,
)
from pipelines_dagster.core.templates import disabled_reason
from pipelines_dagster.core.validation import (
    MAX_RUNTIME_SECONDS,
    MIN_RUNTIME_SECONDS,
    InvalidInputError,
    validate_name,
    validate_urls,
)

# The largest integer every JSON client reads exactly; row ids stay far below it, and
# anything above would overflow the 64-bit id columns before reaching a query.
MAX_ID = 2**53 - 1
# A leap year: beyond that an interval is not a schedule anybody means.
MAX_EVERY_MINUTES = 366 * 24 * 60
# Bounds one request body; a pipeline over more pages crawls its connector's list.
MAX_URLS = 10_000

T = TypeVar("T")


def _domain(validator: Callable[[T], T]) -> AfterValidator:
    """Run a catalog validator inside pydantic, so its message lands on the field like any other."""

    def run(value: T) -> T:
        try:
            return validator(value)
        except InvalidInputError as exc:
            raise PydanticCustomError("invalid_input", "{message}", {"message": exc.message}) from None

    return AfterValidator(run)


def _timezone(name: str) -> str:
    validate_timezone(name)
    return name


Id = Annotated[int, Field(ge=1, le=MAX_ID)]


def iso_text(value: object) -> object:
    """A query time as given, refused unless it is ISO 8601 text."""
    # Pydantic would also read a bare number as a Unix time; the documented format is ISO 8601 only.
    if isinstance(value, str) and not re.match(r"\d{4}-", value):
        raise ValueError("must be an ISO 8601 time such as 2026-12-01T09:00:00Z")
    return value


def in_utc(value: datetime) -> datetime:
    """An aware time in UTC."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC; give a time between years 1 and 9999") from None


Name = Annotated[str, Field(min_length=1, max_length=200), _domain(validate_name)]
FolderName = Annotated[
    str,
    Field(min_length=1, max_length=255, description="A KB folder at the root, created when missing."),
    _domain(lambda name: validate_name(name, field="folder", max_length=255)),
]
Urls = Annotated[
    list[str],
    Field(
        min_length=1,
        max_length=MAX_URLS,
        description="URLs this pipeline crawls instead of its connector's (absolute http or https).",
    ),
    _domain(validate_urls),
]
Cron = Annotated[
    str,
    Field(max_length=120, description="Five fields: minute hour day month weekday.", examples=["30 2 * * *"]),
    _domain(validate_cron),
]
Timezone = Annotated[
    str,
    Field(max_length=64, description="IANA name of the cron's timezone.", examples=["Europe/Stockholm"]),
    _domain(_timezone),
]
EveryMinutes = Annotated[int, Field(ge=1, le=MAX_EVERY_MINUTES, description="Run every N minutes.")]
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


class Schedule(BaseModel):
    """A cron expression with its timezone, or a fixed interval."""

    model_config = ConfigDict(extra="forbid")

    cron: Cron | None = None
    timezone: Timezone | None = None
    every_minutes: EveryMinutes | None = None

    def spec(self) -> ScheduleSpec:
        return ScheduleSpec(cron=self.cron, timezone=self.timezone, every_minutes=self.every_minutes)


class RetryPolicyIn(BaseModel):
    """How a failed crawl is retried: retry n waits delay_seconds × n (linear) or × 2^(n-1) (exponential)."""

    model_config = ConfigDict(extra="forbid")

    backoff: Literal["linear", "exponential"] = DEFAULT_BACKOFF.value
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0, le=MAX_RETRIES)
    delay_seconds: float = Field(default=DEFAULT_DELAY_SECONDS, gt=0, le=MAX_DELAY_SECONDS, allow_inf_nan=False)

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


class PipelineCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


class PipelineUpdate(BaseModel):
    """Only the fields given change; null clears folder, folder_id, schedule and urls."""

    model_config = ConfigDict(extra="forbid")

    # Null is not a value of these, so it is refused rather than read as "leave unchanged".
    name: Name | SkipJsonSchema[None] = None
    save_to_kb: bool | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None
    connector_id: Id | SkipJsonSchema[None] = Field(
        default=None, description="The connector it crawls: how a seeded template is given one."
    )
    folder: FolderName | None = None
    folder_id: Id | None = None
    schedule: Schedule | None = None
    urls: Urls | None = None
    # Not a union with None (its errors would be reported under the member's class name); a null is
    # refused by the validator below and a left-out field keeps its default, which is not validated.
    retry_policy: RetryPolicyIn = None  # type: ignore[assignment]
    max_runtime_seconds: MaxRuntime | None = Field(default=None, description="Null: the deployment's maximum runtime.")

    @field_validator("name", "save_to_kb", "enabled", "connector_id", "retry_policy", mode="before")
    @classmethod
    def _refuse_null(cls, value: Any) -> Any:
        if value is None:
            raise PydanticCustomError("not_null", "must not be null; leave the field out to keep its value")
        return value

    def changes(self) -> PipelineChanges:
        """The catalog's changes: a field left out of the body keeps its value."""
        given = {name: getattr(self, name) for name in self.model_fields_set}
        if "schedule" in given:
            given["schedule"] = self.schedule.spec() if self.schedule is not None else None
        if "retry_policy" in given:
            given["retry"] = given.pop("retry_policy").policy()
        return PipelineChanges(**given)


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
            created_at=pipeline.created_at,
            updated_at=pipeline.updated_at,
        )


class PipelineList(BaseModel):
    pipelines: list[PipelineOut]

    @classmethod
    def of(cls, pipelines: list[Pipeline], schedules: dict[int, PipelineTrigger]) -> PipelineList:
        return cls(pipelines=[PipelineOut.of(pipeline, schedules.get(pipeline.id)) for pipeline in pipelines])


class RunLaunched(BaseModel):
    run_id: str = Field(description="The Dagster run id; follow it under .../runs/{run_id}.")


class ErrorResponse(BaseModel):
    detail: str


class FieldError(BaseModel):
    field: str = Field(description="Dotted path of the field, e.g. schedule.timezone or urls[2].")
    message: str


class ValidationErrorResponse(BaseModel):
    detail: list[FieldError]


class DocumentPage(BaseModel):
    documents: list[DocumentView]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last.")


class SiteIn(BaseModel):
    """A site crawl: start URLs, discovery from sitemaps and same-site links, and its bounds."""

    model_config = ConfigDict(extra="forbid")

    start_urls: list[str] = Field(min_length=1, max_length=MAX_URLS, description="Where discovery starts.")
    max_depth: int | None = Field(
        default=None, description=f"Links followed from a start URL, 0 to {MAX_DEPTH}; default {DEFAULT_MAX_DEPTH}."
    )
    max_pages: int | None = Field(
        default=None, description=f"Pages fetched at most, up to the deployment's cap; default {DEFAULT_MAX_PAGES}."
    )
    include: list[str] = Field(
        default_factory=list, max_length=MAX_PATTERNS, description="Only paths matching one of these globs (/docs/**)."
    )
    exclude: list[str] = Field(default_factory=list, max_length=MAX_PATTERNS, description="Never these paths.")
    subdomains: bool = Field(default=False, description="The start URLs' whole registrable domains.")
    drop_query_params: list[str] | Literal["all"] = Field(
        default_factory=list, description="Query parameters dropped from every discovered URL, or all of them."
    )


# A stored config is shown as it was accepted, whatever today's cap.
MAX_STORED_PAGES = 1_000_000


class SiteOut(BaseModel):
    start_urls: list[str]
    max_depth: int
    max_pages: int
    include: list[str]
    exclude: list[str]
    subdomains: bool
    drop_query_params: list[str] | Literal["all"]

    @classmethod
    def of(cls, site: SiteConfig) -> SiteOut:
        return cls.model_validate(site.to_config())


class ConnectorCreate(BaseModel):
    """A web connector crawls `urls` (mode list, the default) or discovers `site` (mode site)."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="The connector type, e.g. webcrawler.")
    name: Name | None = None
    mode: str | None = Field(default=None, description="list or site; site when `site` is given.")
    urls: list[str] | None = Field(default=None, max_length=MAX_URLS, description="The URLs a list crawl fetches.")
    site: SiteIn | None = None
    index_every_minutes: int | None = Field(default=None, description="The connector's own periodic indexing.")


class ConnectorOut(BaseModel):
    id: int
    workspace_id: int
    type: str
    name: str
    mode: str = Field(description="list or site.")
    urls: list[str] | None = Field(description="A list crawl's URLs; null for a site crawl.")
    site: SiteOut | None = Field(description="A site crawl's bounds; null for a list crawl.")
    periodic_indexing_enabled: bool
    created_at: datetime

    @classmethod
    def of(cls, connector: Connector) -> ConnectorOut:
        site = connector.config.get(SITE_KEY)
        return cls(
            id=connector.id,
            workspace_id=connector.workspace_id,
            type=connector.connector_type,
            name=connector.name,
            mode=crawl_mode(connector.config).value,
            urls=initial_urls(connector),
            site=SiteOut.of(SiteConfig.read(site, max_pages_cap=MAX_STORED_PAGES)) if site else None,
            periodic_indexing_enabled=connector.periodic_indexing_enabled,
            created_at=connector.created_at,
        )


class ConnectorList(BaseModel):
    connectors: list[ConnectorOut]
