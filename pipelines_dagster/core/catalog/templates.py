"""Built-in pipeline templates, as data: presets a KB team turns on by giving one a connector (or URLs)
and enabling it; `seeding` puts them into workspaces."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines_dagster.app_db.models import Pipeline, RetryBackoff
from pipelines_dagster.core.catalog.event_types import EventType
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.catalog.schedules import ScheduleSpec

TEMPLATE_KEY = "TEMPLATE"
"""Where a template pipeline's config says which built-in template it was seeded from."""


def template_key(pipeline: Pipeline) -> str | None:
    """The built-in template a pipeline was seeded from, by key; None for a pipeline a user made."""
    key = (pipeline.config or {}).get(TEMPLATE_KEY)
    return key if isinstance(key, str) else None


@dataclass(frozen=True, kw_only=True)
class Template:
    key: str
    name: str
    description: str
    save_to_kb: bool
    folder: str | None
    """The KB folder its documents go to (a KB template); None for the root, or a raw-crawl template."""
    schedule: ScheduleSpec
    """Seeded off."""
    events: tuple[EventType, ...] = ()
    """Event triggers, seeded on (with the manual one)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    min_success_ratio: float = 0.8
    site: tuple[int, int] | None = None
    """A site crawl's (max depth, max pages) once given start URLs; None for a list crawl."""
    max_runtime_seconds: int | None = None
    """How long one of its runs may take; None: the deployment's maximum runtime."""

    @property
    def mode(self) -> str:
        return "site" if self.site is not None else "list"


TEMPLATES: tuple[Template, ...] = (
    Template(
        key="docs_nightly",
        name="Nightly docs refresh",
        description="Discovers a documentation site every night and keeps its pages in the KB, archiving the gone.",
        save_to_kb=True,
        folder="Docs",
        schedule=ScheduleSpec(cron="30 2 * * *", timezone="UTC"),
        events=(EventType.REFRESH_REQUESTED,),
        site=(3, 2000),
    ),
    Template(
        key="change_watch",
        name="Hourly change watch",
        description="Crawls a list of pages every hour and keeps the raw crawls: the page-change timeline "
        "(and pages.changed notifications) without touching the KB.",
        save_to_kb=False,
        folder=None,
        schedule=ScheduleSpec(every_minutes=60),
        events=(EventType.CONNECTOR_URLS_CHANGED,),
        retry=RetryPolicy(backoff=RetryBackoff.LINEAR, max_retries=2, delay_seconds=30),
        min_success_ratio=0.5,
    ),
    Template(
        key="site_sync",
        name="Site sync",
        description="Mirrors a whole site into the KB four times a day, up to 10,000 pages.",
        save_to_kb=True,
        folder="Site",
        schedule=ScheduleSpec(cron="0 */6 * * *", timezone="UTC"),
        events=(EventType.REFRESH_REQUESTED,),
        site=(5, 10_000),
        min_success_ratio=0.9,
        # Under its 6-hour cron; a slower site's sync is continued by new runs from what each stored.
        max_runtime_seconds=5 * 3600,
    ),
    Template(
        key="faq_refresh",
        name="Support FAQ refresh",
        description="Re-crawls a short list of support and FAQ pages each morning, and whenever a chat answer "
        "found one stale (refresh.requested).",
        save_to_kb=True,
        folder="Support",
        schedule=ScheduleSpec(cron="0 6 * * 1-5", timezone="UTC"),
        events=(EventType.REFRESH_REQUESTED, EventType.CONNECTOR_URLS_CHANGED),
        retry=RetryPolicy(backoff=RetryBackoff.EXPONENTIAL, max_retries=5, delay_seconds=10),
    ),
    Template(
        key="weekly_link_audit",
        name="Weekly link audit",
        description="Crawls a site's pages once a week into raw crawls only: which pages broke or went away.",
        save_to_kb=False,
        folder=None,
        schedule=ScheduleSpec(cron="0 4 * * 0", timezone="UTC"),
        site=(4, 5000),
        min_success_ratio=0.0,
    ),
)


BY_KEY = {template.key: template for template in TEMPLATES}


def template_of(pipeline: Pipeline) -> Template | None:
    """The template a pipeline was seeded from, if any (one this release no longer ships: None)."""
    key = template_key(pipeline)
    return BY_KEY.get(key) if key is not None else None


def disabled_reason(pipeline: Pipeline) -> str | None:
    """Why a pipeline does not run, in a sentence; None when it is enabled."""
    if pipeline.enabled:
        return None
    template = template_of(pipeline)
    if template is None:
        return "switched off: its triggers start nothing until it is enabled"
    needs = "start URLs" if template.site is not None else "URLs"
    return (
        f"a built-in template ({template.key}), shipped disabled: give it a connector or {needs} and enable it; "
        "its schedule is off until you enable that trigger too"
    )
