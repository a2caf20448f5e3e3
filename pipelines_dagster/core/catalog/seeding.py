"""Seeding the built-in templates into a workspace: the ones it lacks are added disabled, the ones it has
are left as the user left them.

As in the reference engine, a template is seeded disabled, with its manual and event triggers on
and its schedule off, so a recurring sweep is always opt-in; the pipeline, not the trigger, is the
switch (a trigger of a disabled template fires into nothing). Reseeding adds the templates a
workspace lacks and leaves the ones it has as the user left them: enabled or not, its triggers
changed, deleted or added."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Pipeline, PipelineTrigger, TriggerKind
from pipelines_dagster.core.catalog.folders import get_or_create_folder
from pipelines_dagster.core.catalog.templates import TEMPLATE_KEY, TEMPLATES, Template
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.crawl.health import THRESHOLD_KEY

SCHEDULE_OFF_REASON = "seeded off: a template's recurring sweep is opt-in; enable this trigger to schedule it"


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
            PipelineTrigger.manual_of(pipeline),
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
