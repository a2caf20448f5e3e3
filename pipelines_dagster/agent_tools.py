"""Tools the chat agent may call, each bound to one workspace when it is built, answering in compact text and
with the same answer as JSON; `pipelines-dagster mcp` serves the same tools over MCP."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Annotated, Any

import pydantic
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.errors import InvalidInputError, NotFoundError
from pipelines_dagster.core.kb.changes import ChangeStatus, PageChangeView, list_changes
from pipelines_dagster.core.ledger.costs import CostTotals, cost_totals
from pipelines_dagster.core.validation import Id, field_rule, in_utc, iso_8601_text
from pipelines_dagster.history import MAX_LIMIT, PipelineRunView, RunHistory

FINISHED_FORMAT = "%Y-%m-%d %H:%M UTC"
# ISO 8601 text (a moment without a zone is read as UTC, as every time here is), refused when UTC cannot hold it.
Moment = Annotated[datetime, pydantic.Field(strict=False), field_rule(iso_8601_text, before=True), field_rule(in_utc)]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool answered: text for the model, the same as JSON for a program (None for an error), and whether
    the call was refused, with the text saying what to fix."""

    text: str
    data: dict[str, Any] | None = None
    is_error: bool = False


@dataclass(frozen=True)
class AgentTool:
    """A function-calling tool: its spec for any LLM client, and a call that always answers, in text and as JSON."""

    name: str
    description: str
    arguments: type[pydantic.BaseModel]
    result: type
    """What the handler returns: a pydantic model or a dataclass, which the answer's data is the JSON of."""
    handler: Callable[[Any], Any]
    render: Callable[[Any], str]
    """The handler's result as the text the model reads."""

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, derived from the model that validates them."""
        return self.arguments.model_json_schema()

    @cached_property
    def _result_adapter(self) -> pydantic.TypeAdapter[Any]:
        return pydantic.TypeAdapter(self.result)

    @property
    def output_schema(self) -> dict[str, Any]:
        """The JSON Schema of the answer's data."""
        return self._result_adapter.json_schema(mode="serialization")

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __call__(self, **arguments: Any) -> str:
        return self.answer(**arguments).text

    def answer(self, **arguments: Any) -> ToolAnswer:
        # The model reads the answer, so bad arguments come back as an answer it can correct, not as an exception.
        try:
            validated = self.arguments.model_validate(arguments)
        except pydantic.ValidationError as exc:
            return self._refused(f"Invalid arguments for {self.name}: {self._problems(exc)}")
        try:
            result = self.handler(validated)
        except InvalidInputError as exc:
            return self._refused(f"Invalid arguments for {self.name}: {exc.field}: {exc.message}")
        except NotFoundError as exc:
            return self._refused(f"{self.name}: {exc}")
        except sa.exc.SQLAlchemyError:
            # The error's text holds the SQL statement and its parameters: for the log, not the conversation.
            logger.exception("%s failed in the app database", self.name)
            return self._refused(f"{self.name} could not read the app database just now; try again shortly")
        return ToolAnswer(text=self.render(result), data=self._result_adapter.dump_python(result, mode="json"))

    @staticmethod
    def _refused(text: str) -> ToolAnswer:
        return ToolAnswer(text=text, is_error=True)

    def _problems(self, error: pydantic.ValidationError) -> str:
        accepted = ", ".join(self.arguments.model_fields)
        problems = []
        for problem in error.errors():
            where = ".".join(str(part) for part in problem["loc"]) or "arguments"
            if problem["type"] == "extra_forbidden":
                problems.append(f"{where} is not an argument of this tool (it takes only {accepted})")
            else:
                problems.append(f"{where}: {problem['msg']}")
        return "; ".join(problems)


class PipelineRunsArguments(pydantic.BaseModel):
    # Strict, like the schema the model sees: "5" is not an integer and true is not a pipeline id.
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, title="get_pipeline_runs")

    pipeline_id: Id | None = pydantic.Field(
        default=None, description="Only this pipeline's runs; omit or null for every pipeline of the workspace."
    )
    limit: int = pydantic.Field(default=20, ge=1, le=MAX_LIMIT, description="How many runs, newest first.")


class PipelineRuns(pydantic.BaseModel):
    runs: list[PipelineRunView] = pydantic.Field(description="Newest first.")


def _require_pipeline(sessions: sessionmaker[Session], workspace_id: int, pipeline_id: int | None) -> None:
    """NotFoundError, saying what to do, unless `pipeline_id` is None or names a pipeline of the workspace."""
    if pipeline_id is None:
        return
    with sessions() as session:
        try:
            get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        except NotFoundError:
            raise NotFoundError(
                f"no such pipeline in this workspace: {pipeline_id}; leave pipeline_id out for all of its pipelines"
            ) from None


def build_pipeline_run_tools(
    *, workspace_id: int | None, history: RunHistory, sessions: sessionmaker[Session]
) -> list[AgentTool]:
    """The run-history tools for a conversation in `workspace_id`; none outside a workspace."""
    if workspace_id is None:
        return []

    def get_pipeline_runs(arguments: PipelineRunsArguments) -> PipelineRuns:
        _require_pipeline(sessions, workspace_id, arguments.pipeline_id)
        page = history.list_runs(workspace_id, pipeline_id=arguments.pipeline_id, limit=arguments.limit)
        return PipelineRuns(runs=page.runs)

    return [
        AgentTool(
            name="get_pipeline_runs",
            description=(
                "Recent runs of this workspace's pipelines, newest first, one line each: "
                "pipeline • status • trigger • finished • documents / crawls (and the error of a failed run)."
            ),
            arguments=PipelineRunsArguments,
            result=PipelineRuns,
            handler=get_pipeline_runs,
            render=render_runs,
        )
    ]


def render_runs(result: PipelineRuns) -> str:
    if not result.runs:
        return "No pipeline runs yet."
    return "\n".join(_render_run(run) for run in result.runs)


def _render_run(run: PipelineRunView) -> str:
    documents = [run.documents_created, run.documents_updated, run.documents_unchanged]
    parts = [
        run.pipeline_name or f"pipeline {run.pipeline_id}",
        run.status,
        run.trigger or "no trigger",
        run.finished_at.strftime(FINISHED_FORMAT) if run.finished_at else "not finished",
        f"{_count(documents, 'doc')} / {_count([run.crawls_attempted], 'crawl')}",
    ]
    if run.pages_resumed:
        parts.append(f"continued run {run.root_run_id}, {_plural(run.pages_resumed, 'page')} resumed")
    if run.error:
        parts.append(run.error)
    return " • ".join(parts)


def _count(values: list[int | None], noun: str) -> str:
    known = [value for value in values if value is not None]
    if not known:
        return f"no {noun}s"
    return _plural(sum(known), noun)


class PageChangesArguments(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, title="get_page_changes")

    pipeline_id: Id | None = pydantic.Field(
        default=None, description="Only this pipeline's pages; omit or null for every pipeline of the workspace."
    )
    status: ChangeStatus | None = pydantic.Field(
        default=None, description="Only pages that were new, changed or removed; omit for all three."
    )
    limit: int = pydantic.Field(default=20, ge=1, le=MAX_LIMIT, description="How many changes, newest first.")


def build_page_change_tools(*, workspace_id: int | None, sessions: sessionmaker[Session]) -> list[AgentTool]:
    """The page-change timeline tool for a conversation in `workspace_id`; none outside a workspace."""
    if workspace_id is None:
        return []

    def get_page_changes(arguments: PageChangesArguments) -> PageChanges:
        _require_pipeline(sessions, workspace_id, arguments.pipeline_id)
        with sessions() as session:
            changes, _ = list_changes(
                session,
                workspace_id=workspace_id,
                pipeline_id=arguments.pipeline_id,
                status=arguments.status,
                limit=arguments.limit,
            )
        return PageChanges(changes=changes)

    return [
        AgentTool(
            name="get_page_changes",
            description=(
                "Pages of this workspace's pipelines that were new, changed or removed in recent crawls, "
                "newest first, one line each: observed • status • URL • pipeline (and the size of a change)."
            ),
            arguments=PageChangesArguments,
            result=PageChanges,
            handler=get_page_changes,
            render=render_changes,
        )
    ]


class PageChanges(pydantic.BaseModel):
    changes: list[PageChangeView] = pydantic.Field(description="Newest first; `diff` is a changed page's unified diff.")


def render_changes(result: PageChanges) -> str:
    if not result.changes:
        return "No page changes recorded."
    return "\n".join(_render_change(change) for change in result.changes)


def _render_change(change: PageChangeView) -> str:
    parts = [change.observed_at.strftime(FINISHED_FORMAT), change.status, change.url, f"pipeline {change.pipeline_id}"]
    if change.diff:
        lines = change.diff.splitlines()[2:]
        added = sum(line.startswith("+") for line in lines)
        removed = sum(line.startswith("-") for line in lines)
        parts.append(f"+{added} -{removed} lines")
    return " • ".join(parts)


class CostTotalsArguments(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, title="get_cost_totals")

    pipeline_id: Id | None = pydantic.Field(
        default=None, description="Only this pipeline's charges; omit or null for every pipeline of the workspace."
    )
    since: Moment | None = pydantic.Field(
        default=None, description="From this moment (ISO 8601, e.g. 2026-11-01T00:00:00Z); omit for all."
    )
    until: Moment | None = pydantic.Field(
        default=None, description="Up to this moment, excluded (ISO 8601); omit for up to now."
    )


def build_cost_tools(*, workspace_id: int | None, sessions: sessionmaker[Session]) -> list[AgentTool]:
    """The cost-totals tool for a conversation in `workspace_id`; none outside a workspace."""
    if workspace_id is None:
        return []

    def get_cost_totals(arguments: CostTotalsArguments) -> CostTotals:
        _require_pipeline(sessions, workspace_id, arguments.pipeline_id)
        with sessions() as session:
            totals = cost_totals(
                session,
                workspace_id=workspace_id,
                since=arguments.since,
                until=arguments.until,
                pipeline_id=arguments.pipeline_id,
            )
        return totals

    return [
        AgentTool(
            name="get_cost_totals",
            description=(
                "What this workspace's crawls were charged, from the ledger, in micro-credits (a million to a "
                "credit): the total over a time range, then one line per pipeline, dearest first."
            ),
            arguments=CostTotalsArguments,
            result=CostTotals,
            handler=get_cost_totals,
            render=render_costs,
        )
    ]


def render_costs(totals: CostTotals) -> str:
    since = totals.since.strftime(FINISHED_FORMAT) if totals.since else "the start"
    until = totals.until.strftime(FINISHED_FORMAT) if totals.until else "now"
    head = f"{totals.micros} micro-credits in {_plural(totals.charges, 'charge')} from {since} to {until}"
    lines = [
        f"{cost.pipeline_name or f'pipeline {cost.pipeline_id}'} • {cost.micros} micro-credits • "
        f"{_plural(cost.charges, 'charge')}"
        for cost in totals.pipelines
    ]
    return "\n".join([head, *lines])


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def build_workspace_tools(
    *, workspace_id: int | None, history: RunHistory, sessions: sessionmaker[Session]
) -> list[AgentTool]:
    """Every chat tool for a conversation in `workspace_id` (what the MCP server serves)."""
    return [
        *build_pipeline_run_tools(workspace_id=workspace_id, history=history, sessions=sessions),
        *build_page_change_tools(workspace_id=workspace_id, sessions=sessions),
        *build_cost_tools(workspace_id=workspace_id, sessions=sessions),
    ]
