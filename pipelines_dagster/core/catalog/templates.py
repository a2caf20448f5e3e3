"""Built-in pipeline templates, seeded into every workspace: presets a KB team turns on by giving one a
connector (or URLs) and enabling it.

As in the reference engine, a template is seeded disabled, with its manual and event triggers on
and its schedule off, so a recurring sweep is always opt-in; the pipeline, not the trigger, is the
switch (a trigger of a disabled template fires into nothing). Reseeding adds the templates a
workspace lacks and leaves the ones it has as the user left them: enabled or not, its triggers
changed, deleted or added.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger, RetryBackoff, TriggerKind
from pipelines_dagster.core.catalog.pipelines import (
    TEMPLATE_KEY,
    get_or_create_folder,
    get_workspace,
    manual_trigger,
    template_key,
)
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.crawl.health import THRESHOLD_KEY
from pipelines_dagster.core.triggers.webhooks import EventType

SCHEDULE_OFF_REASON = "seeded off: a template's recurring sweep is opt-in; enable this trigger to schedule it"


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


@dataclass(kw_only=True)
class SeedReport:
    workspace_id: int
    created: list[int] = field(default_factory=list)
    """Pipelines made from templates the workspace lacked."""
    kept: list[int] = field(default_factory=list)
    """Template pipelines it had, left as they were."""


def seed_templates(session: Session, workspace_id: int, *, templates: Sequence[Template] = TEMPLATES) -> SeedReport:
    """Give the workspace each template it lacks; idempotent, and the ones it has are not touched."""
    owner = get_workspace(session, workspace_id).owner_user_id
    existing = {
        key: pipeline_id
        for pipeline_id, config in session.execute(
            sa.select(Pipeline.id, Pipeline.config).where(Pipeline.workspace_id == workspace_id)
        )
        if isinstance(key := (config or {}).get(TEMPLATE_KEY), str)
    }
    taken = set(session.scalars(sa.select(Pipeline.name).where(Pipeline.workspace_id == workspace_id)))
    report = SeedReport(workspace_id=workspace_id)
    for template in templates:
        if template.key in existing:
            report.kept.append(existing[template.key])
            continue
        report.created.append(_seed(session, workspace_id, template, name=_free(template.name, taken), owner=owner).id)
    session.flush()
    return report


def _free(name: str, taken: set[str]) -> str:
    """The template's name, or with a suffix when a user pipeline of the workspace has it."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name} ({number})"
    taken.add(candidate)
    return candidate


def _seed(session: Session, workspace_id: int, template: Template, *, name: str, owner: str) -> Pipeline:
    folder = get_or_create_folder(session, workspace_id=workspace_id, name=template.folder) if template.folder else None
    pipeline = Pipeline(
        workspace_id=workspace_id,
        connector_id=None,
        name=name,
        save_to_kb=template.save_to_kb,
        destination_folder_id=folder.id if folder is not None else None,
        enabled=False,
        created_by=owner,
        config={TEMPLATE_KEY: template.key, THRESHOLD_KEY: template.min_success_ratio},
        max_runtime_seconds=template.max_runtime_seconds,
    )
    template.retry.apply_to(pipeline)
    session.add(pipeline)
    session.flush()
    spec = template.schedule
    session.add_all(
        [
            manual_trigger(pipeline),
            *(
                PipelineTrigger(
                    workspace_id=workspace_id, pipeline_id=pipeline.id, kind=TriggerKind.EVENT.value, event_type=event
                )
                for event in template.events
            ),
            PipelineTrigger(
                workspace_id=workspace_id,
                pipeline_id=pipeline.id,
                kind=TriggerKind.SCHEDULE.value,
                cron=spec.cron,
                timezone=spec.timezone,
                interval_minutes=spec.every_minutes,
                enabled=False,
                disabled_reason=SCHEDULE_OFF_REASON,
            ),
        ]
    )
    return pipeline
