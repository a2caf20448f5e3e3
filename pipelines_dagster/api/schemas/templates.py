"""The built-in pipeline templates and what seeding them did, as the CLI prints them (the API has no route)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pipelines_dagster.core.catalog.seeding import SeedReport
from pipelines_dagster.core.catalog.templates import Template
from pipelines_dagster.core.crawl.render.rule import RenderMode, default_render
from pipelines_dagster.core.crawl.site.config import CrawlMode


class TemplateOut(BaseModel):
    key: str
    name: str
    description: str
    save_to_kb: bool
    folder: str | None
    mode: str = Field(description="list or site.")
    render: RenderMode = Field(description="Which pages the connector it is given renders: its mode's default.")
    schedule: str = Field(description="The schedule it is seeded with (off), in words.")
    events: list[str] = Field(description="The event types it is subscribed to.")

    @classmethod
    def of(cls, template: Template) -> TemplateOut:
        return cls(
            key=template.key,
            name=template.name,
            description=template.description,
            save_to_kb=template.save_to_kb,
            folder=template.folder,
            mode=template.mode,
            render=default_render(CrawlMode(template.mode)),
            schedule=template.schedule.describe(),
            events=[event.value for event in template.events],
        )


class TemplateList(BaseModel):
    templates: list[TemplateOut]


class WorkspaceSeedOut(BaseModel):
    workspace_id: int
    created: list[int] = Field(description="Pipelines made from the templates the workspace lacked.")
    kept: list[int] = Field(description="Pipelines of templates it had, left as they were.")

    @classmethod
    def of(cls, report: SeedReport) -> WorkspaceSeedOut:
        return cls(workspace_id=report.workspace_id, created=report.created, kept=report.kept)


class RetentionScheduleOut(BaseModel):
    name: str
    restarted: bool = Field(description="It was stopped and is on again.")


class SeedOut(BaseModel):
    workspaces: list[WorkspaceSeedOut]
    retention_schedule: RetentionScheduleOut
