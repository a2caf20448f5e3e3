"""A pipeline's runs: `pipeline run` starts one now on the running Dagster, `runs` lists its run history as the
API does."""

from __future__ import annotations

import click

from pipelines_dagster.api.schemas.runs import RunLaunched
from pipelines_dagster.cli.common import ID, emit, json_option, open_sessions, pipeline_ref, user_errors
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import load_settings


@click.command("run")
@pipeline_ref
@json_option
@user_errors
def run_now(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """Run a pipeline now on the running Dagster (webserver at $PIPELINES_DAGSTER_URL); it needs an enabled
    manual trigger (`trigger list` shows it)."""
    # Imported on use: the GraphQL client is only needed here.
    from pipelines_dagster.launch import DagsterUnavailableError, LaunchFailedError, launch_pipeline_run

    try:
        run_id = launch_pipeline_run(open_sessions(load_settings()), workspace_id=workspace_id, pipeline_id=pipeline_id)
    except (DagsterUnavailableError, LaunchFailedError) as exc:
        raise click.ClickException(str(exc)) from None
    emit(as_json, RunLaunched(run_id=run_id), run_id)


@click.command("runs")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", required=True, type=ID)
@click.option("--limit", default=20, show_default=True, type=int, help="Runs per page, 1 to 100.")
@click.option("--cursor", default=None, help="`next_cursor` of the previous page.")
@json_option
@user_errors
def runs(workspace_id: int, pipeline_id: int, limit: int, cursor: str | None, as_json: bool) -> None:
    """A pipeline's runs from Dagster, newest first, as the API's run history lists them."""
    from pipelines_dagster.history import MAX_LIMIT, RunHistory

    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError("limit", f"must be from 1 to {MAX_LIMIT}")
    settings = load_settings()
    sessions = open_sessions(settings)
    with sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    history = RunHistory(dagster_instance(settings), sessions, ui_base_url=settings.dagster_url)
    page = history.list_runs(workspace_id, pipeline_id=pipeline_id, limit=limit, cursor=cursor)
    lines = [
        f"{run.run_id}\t{run.status}\t{run.trigger or '-'}\t{run.created_at.isoformat()}"
        + (f"\t{run.error}" if run.error else "")
        for run in page.runs
    ]
    if page.next_cursor:
        lines.append(f"more: --cursor {page.next_cursor}")
    emit(as_json, page, "\n".join(lines) or f"pipeline {pipeline_id} has no runs")
