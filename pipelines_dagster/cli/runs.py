"""A pipeline's runs: `pipeline run` starts one now on the running Dagster (and with --wait follows it to its end),
`runs` lists its run history as the API does."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from pipelines_dagster.api.schemas.runs import RunLaunched
from pipelines_dagster.cli.common import ID, emit, json_option, open_sessions, pipeline_ref, user_errors
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.run.report import duration
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import Settings, load_settings

if TYPE_CHECKING:
    from pipelines_dagster.history import PipelineRunDetail, PipelineRunView, RunHistory

# How often --wait reads the run; its counts change once per progress interval (10 s), its status at any time.
FOLLOW_EVERY_SECONDS = 1.0
# A run the launch just created that the instance still does not know after this long is another instance's.
UNKNOWN_RUN_SECONDS = 15.0
ENDED = ("succeeded", "failed", "canceled")
BAR_WIDTH = 24


def run_link(settings: Settings, run_id: str) -> str:
    """The run's page in the Dagster UI of the webserver it was launched through."""
    return f"{settings.launch_url.rstrip('/')}/runs/{run_id}"


def counts(run: PipelineRunView) -> str:
    """The run's crawl counts: what it stored, or while it crawls, how far it got and how fast."""
    if run.crawls_attempted is None:
        return "-"
    of = f" of {run.crawls_total}" if run.crawls_total is not None else ""
    shown = f"{run.crawls_attempted}{of} attempted, {run.crawls_succeeded} succeeded, {run.crawls_failed} failed"
    if run.status == "running" and run.pages_per_second is not None:
        shown += f", {run.pages_per_second:.1f} pages/s"
        if run.eta_seconds and run.progress_at:
            # The time left when the counts were recorded, less the time since (up to a progress interval).
            left = run.eta_seconds - (datetime.now(UTC) - run.progress_at).total_seconds()
            shown += f", about {duration(left)} left" if left >= 1 else ""
    return shown


def took(run: PipelineRunView) -> str:
    """How long the run took, or has taken so far."""
    if run.started_at is None:
        return "-"
    return duration(((run.finished_at or datetime.now(UTC)) - run.started_at).total_seconds())


def charge(run: PipelineRunView) -> str:
    return f"{run.charged_micros} micros" if run.charged_micros is not None else "-"


def describe_run(run: PipelineRunView) -> str:
    """One line per run: id, status, trigger, created, counts, duration and charge, then its error."""
    line = f"{run.run_id}\t{run.status}\t{run.trigger or '-'}\t{run.created_at.isoformat()}"
    line += f"\t{counts(run)}\t{took(run)}\t{charge(run)}"
    return line + (f"\t{run.error}" if run.error else "")


def progress_line(run: PipelineRunView, *, bar: bool) -> str:
    """Where a followed run is: its status, its counts (with a bar while the total is known) and its duration."""
    shown = f"{run.status}, {took(run)}"
    if run.crawls_attempted is None:
        return shown
    if bar and run.crawls_total:
        filled = min(BAR_WIDTH, BAR_WIDTH * run.crawls_attempted // run.crawls_total)
        shown += f" [{'#' * filled}{'.' * (BAR_WIDTH - filled)}]"
    return f"{shown}: {counts(run)}"


def follow(history: RunHistory, workspace_id: int, pipeline_id: int, run_id: str) -> PipelineRunDetail:
    """Read the run until it ends, showing where it is on stderr: one line rewritten on a terminal, a line
    per change elsewhere. The run as it ended."""
    terminal = sys.stderr.isatty()
    shown: tuple[object, ...] = ()
    since = time.monotonic()
    while True:
        run = history.get_run(workspace_id, run_id, pipeline_id=pipeline_id)
        if run is None:
            if time.monotonic() - since > UNKNOWN_RUN_SECONDS:
                raise click.ClickException(
                    f"run {run_id} is not in the Dagster instance this command reads (DAGSTER_HOME, else the data "
                    "dir's dagster-home); set DAGSTER_HOME to the webserver's, or follow the run in the UI"
                )
        else:
            if terminal:
                # Cut to the terminal's width: a line that wrapped would not be rewritten in place.
                line, width = progress_line(run, bar=True), _columns()
                line = line[: width - 1] if width else line
                click.echo(f"\r\x1b[K{line}", nl=run.status in ENDED, err=True)
            # A line per change of status or counts, not per second.
            elif (changed := (run.status, run.crawls_attempted, run.crawls_failed, run.progress_at)) != shown:
                click.echo(progress_line(run, bar=False), err=True)
                shown = changed
            if run.status in ENDED:
                return run
        time.sleep(FOLLOW_EVERY_SECONDS)


def _columns() -> int:
    """The width of the terminal stderr writes to; 0 when it does not say."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 0


@click.command("run")
@pipeline_ref
@click.option("--wait", is_flag=True, help="Follow the run until it ends, with its progress; exit 1 if it fails.")
@json_option
@user_errors
def run_now(workspace_id: int, pipeline_id: int, wait: bool, as_json: bool) -> None:
    """Run a pipeline now on the running Dagster (webserver at $PIPELINES_DAGSTER_URL); it needs an enabled
    manual trigger (`trigger list` shows it). Prints the run id and its page in the Dagster UI."""
    # Imported on use: the GraphQL client is only needed here.
    from pipelines_dagster.launch import DagsterUnavailableError, LaunchFailedError, launch_pipeline_run

    settings = load_settings()
    sessions = open_sessions(settings)
    try:
        run_id = launch_pipeline_run(sessions, workspace_id=workspace_id, pipeline_id=pipeline_id)
    except (DagsterUnavailableError, LaunchFailedError) as exc:
        raise click.ClickException(str(exc)) from None
    link = run_link(settings, run_id)
    if not wait:
        emit(
            as_json,
            RunLaunched.of(workspace_id=workspace_id, pipeline_id=pipeline_id, run_id=run_id),
            f"{run_id}\n{link}",
        )
        return
    from pipelines_dagster.history import RunHistory

    click.echo(f"{run_id}\n{link}", err=as_json)
    history = RunHistory(dagster_instance(settings), sessions, ui_base_url=settings.launch_url)
    try:
        run = follow(history, workspace_id, pipeline_id, run_id)
    except KeyboardInterrupt:
        click.echo(f"\nstopped following run {run_id}; it goes on: {link}", err=True)
        raise click.exceptions.Exit(130) from None
    limited = f"; rate limited by {run.rate_limited_by}" if run.rate_limited_by else ""
    emit(as_json, run, f"run {run_id} {run.status} in {took(run)}: {counts(run)}; charged {charge(run)}{limited}")
    if run.status != "succeeded":
        raise click.ClickException(f"run {run_id} {run.status}: {run.error or 'no error was recorded'}")


@click.command("runs")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", required=True, type=ID)
@click.option("--limit", default=20, show_default=True, type=int, help="Runs per page, 1 to 100.")
@click.option("--cursor", default=None, help="`next_cursor` of the previous page.")
@json_option
@user_errors
def runs(workspace_id: int, pipeline_id: int, limit: int, cursor: str | None, as_json: bool) -> None:
    """A pipeline's runs from Dagster, newest first, as the API's run history lists them: per run its status,
    trigger, creation time, crawl counts (live while it crawls), duration and charge."""
    from pipelines_dagster.history import MAX_LIMIT, RunHistory

    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError("limit", f"must be from 1 to {MAX_LIMIT}")
    settings = load_settings()
    sessions = open_sessions(settings)
    with sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    history = RunHistory(dagster_instance(settings), sessions, ui_base_url=settings.dagster_url)
    page = history.list_runs(workspace_id, pipeline_id=pipeline_id, limit=limit, cursor=cursor)
    lines = [describe_run(run) for run in page.runs]
    if page.next_cursor:
        lines.append(f"more: --cursor {page.next_cursor}")
    emit(as_json, page, "\n".join(lines) or f"pipeline {pipeline_id} has no runs")
