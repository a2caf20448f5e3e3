"""Request and response bodies of the HTTP API; per-field rules come from the catalog's own validators."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from pipelines_dagster.app_db.models import Connector, Pipeline, PipelineTrigger
from pipelines_dagster.core.catalog.connectors import initial_urls
from pipelines_dagster.core.catalog.pipelines import PipelineChanges
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
from pipelines_dagster.core.catalog.schedules import MAX_EVERY_MINUTES, ScheduleSpec, validate_cron, validate_timezone
from pipelines_dagster.core.catalog.templates import disabled_reason, template_key
from pipelines_dagster.core.crawl.site.config import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGES,
    MAX_DEPTH,
    MAX_PATTERNS,
    SITE_KEY,
    SiteConfig,
    crawl_mode,
)
from pipelines_dagster.core.kb.documents import DocumentView
from pipelines_dagster.core.validation import (
    MAX_RUNTIME_SECONDS,
    MIN_RUNTIME_SECONDS,
    Id,
    field_rule,
    in_utc,
    iso_8601_text,
    validate_name,
    validate_urls,
)

# Bounds one request body; a pipeline over more pages crawls its connector's list.
MAX_URLS = 10_000


class RequestBody(BaseModel):
    """A request body: unknown fields are refused, and JSON types are taken as they are, so `"no"` is no
    boolean, `true` no id and `"5"` no number (an integer is a number, though).

    FastAPI validates the parsed JSON as Python objects, where strict mode wants an enum member itself:
    an enum field says `strict=False` (a list of them `Strict(False)` on its items), since JSON has no enums
    and a member arrives as its text.
    """

    model_config = ConfigDict(extra="forbid", strict=True)


def _timezone(name: str) -> str:
    validate_timezone(name)
    return name


# A query time: ISO 8601 text only (pydantic would read a bare number as a Unix time), then in UTC.
IsoText = field_rule(iso_8601_text, before=True)
InUtc = field_rule(in_utc)

Name = Annotated[str, Field(min_length=1, max_length=200), field_rule(validate_name)]
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


class PipelineUpdate(RequestBody):
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


class SiteIn(RequestBody):
    """A site crawl: start URLs, discovery from sitemaps and same-site links, and its bounds."""

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


class ConnectorCreate(RequestBody):
    """A web connector crawls `urls` (mode list, the default) or discovers `site` (mode site)."""

    type: str = Field(description="The connector type, e.g. webcrawler.")
    name: Name | None = None
    mode: str | None = Field(default=None, description="list or site; site when `site` is given.")
    urls: list[str] | None = Field(default=None, max_length=MAX_URLS, description="The URLs a list crawl fetches.")
    site: SiteIn | None = None
    index_every_minutes: EveryMinutes | None = Field(default=None, description="The connector's own periodic indexing.")


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
