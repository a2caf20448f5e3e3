"""`pipelines-dagster pipeline`: create, change, list, switch and delete a workspace's pipelines, and run one now."""

from __future__ import annotations

import click
from sqlalchemy.orm import Session

from pipelines_dagster.api.schemas.common import DeletedOut
from pipelines_dagster.api.schemas.pipelines import PipelineList, PipelineOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.cli.common import ID, Group, emit, json_option, open_sessions, pipeline_ref, user_errors
from pipelines_dagster.cli.pipeline_options import (
    keep,
    max_runtime_option,
    refuse_both,
    retry_of,
    retry_options,
    schedule_of,
    schedule_options,
    worker_queue_option,
)
from pipelines_dagster.cli.runs import run_now
from pipelines_dagster.core.catalog.pipelines import (
    PipelineChanges,
    get_pipeline,
    list_pipelines,
)
from pipelines_dagster.core.catalog.schedules import ScheduleSpec, schedule_triggers
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import load_settings


@click.group(cls=Group)
def pipeline() -> None:
    """Pipelines: what to do with a connector's crawl, and when."""


@pipeline.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--connector", "connector_id", required=True, type=ID)
@click.option("--name", required=True)
@click.option(
    "--save-to-kb/--no-save-to-kb",
    default=True,
    show_default=True,
    help="Save pages as KB documents, or keep only the raw crawl result.",
)
@click.option("--folder", default=None, help="Destination KB folder (created if missing; root if omitted).")
@click.option("--folder-id", type=ID, default=None, help="Destination KB folder by id, instead of --folder.")
@click.option("--url", "urls", multiple=True, help="A URL this pipeline crawls instead of its connector's; repeat.")
@schedule_options
@click.option("--disabled", is_flag=True, help="Create the pipeline switched off.")
@retry_options(defaults=True)
@max_runtime_option
@worker_queue_option
@json_option
@user_errors
def pipeline_create(
    workspace_id: int,
    connector_id: int,
    name: str,
    save_to_kb: bool,
    folder: str | None,
    folder_id: int | None,
    urls: tuple[str, ...],
    cron: str | None,
    timezone: str | None,
    every_minutes: int | None,
    disabled: bool,
    backoff: str,
    max_retries: int,
    delay_seconds: float,
    max_runtime_seconds: int | None,
    worker_queue: str | None,
    as_json: bool,
) -> None:
    """Create a pipeline over a connector, optionally on a schedule."""
    from pipelines_dagster import services

    retry = retry_of(backoff, max_retries, delay_seconds)
    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        created = services.create_pipeline(
            session,
            dagster_instance(settings),
            workspace_id=workspace_id,
            connector_id=connector_id,
            name=name,
            save_to_kb=save_to_kb,
            folder_name=folder,
            folder_id=folder_id,
            urls=list(urls) or None,
            schedule=schedule_of(cron, timezone, every_minutes),
            enabled=not disabled,
            retry=retry,
            max_runtime_seconds=max_runtime_seconds,
            worker_queue=worker_queue,
        )
        shown = read_pipeline(session, created)
    next_fire_at = shown.schedule.next_fire_at if shown.schedule else None
    when = f", next run {next_fire_at.isoformat()}" if next_fire_at else ""
    emit(as_json, shown, f"pipeline {shown.id} created{when}")


def describe(shown: PipelineOut) -> str:
    """One line per pipeline: id, name, state, schedule, its own worker queue, and its partition in the Dagster UI."""
    schedule = shown.schedule
    if schedule is None:
        when = "no schedule"
    else:
        every = ScheduleSpec(
            cron=schedule.cron, timezone=schedule.timezone, every_minutes=schedule.every_minutes
        ).describe()
        when = f"{every}, next {schedule.next_fire_at.isoformat()}" if schedule.next_fire_at else f"{every}, off"
    state = "enabled" if shown.enabled else f"disabled ({shown.disabled_reason})"
    managed = ", connector's own indexing" if shown.system_managed else ""
    queue = f", on queue {shown.worker_queue}" if shown.worker_queue else ""
    partition = f"partition {shown.partition_key}" if shown.partition_key else "no partition (cannot run)"
    return f"{shown.id}\t{shown.name}\t{state}, {when}{managed}{queue}\t{partition}"


def read_pipeline(session: Session, pipeline: Pipeline) -> PipelineOut:
    """The pipeline as the API answers a write: its timestamps and server defaults the database's."""
    session.flush()
    session.refresh(pipeline)
    return PipelineOut.of(pipeline, schedule_triggers(session, [pipeline.id]).get(pipeline.id))


@pipeline.command("update")
@pipeline_ref
@click.option("--name", default=None)
@click.option(
    "--save-to-kb/--no-save-to-kb", default=None, help="Save pages as KB documents, or keep only the raw crawl."
)
@click.option(
    "--connector", "connector_id", type=ID, default=None, help="The connector it crawls (a template's first)."
)
@click.option("--folder", default=None, help="Destination KB folder by name (created if missing).")
@click.option("--folder-id", type=ID, default=None, help="Destination KB folder by id.")
@click.option("--no-folder", is_flag=True, help="Save into the KB root.")
@click.option("--url", "urls", multiple=True, help="A URL this pipeline crawls instead of its connector's; repeat.")
@click.option("--no-urls", is_flag=True, help="Crawl the connector's URLs again.")
@schedule_options
@click.option("--no-schedule", is_flag=True, help="Remove the schedule; the pipeline runs only when triggered.")
@click.option("--enable/--disable", "enabled", default=None, help="Switch the pipeline on or off.")
@retry_options(defaults=False)
@max_runtime_option
@click.option("--default-max-runtime", is_flag=True, help="Use the deployment's maximum runtime again.")
@worker_queue_option
@click.option("--default-queue", is_flag=True, help="Send its runs to the run launcher's default queue again.")
@json_option
@user_errors
def pipeline_update(
    workspace_id: int,
    pipeline_id: int,
    name: str | None,
    save_to_kb: bool | None,
    connector_id: int | None,
    folder: str | None,
    folder_id: int | None,
    no_folder: bool,
    urls: tuple[str, ...],
    no_urls: bool,
    cron: str | None,
    timezone: str | None,
    every_minutes: int | None,
    no_schedule: bool,
    enabled: bool | None,
    backoff: str | None,
    max_retries: int | None,
    delay_seconds: float | None,
    max_runtime_seconds: int | None,
    default_max_runtime: bool,
    worker_queue: str | None,
    default_queue: bool,
    as_json: bool,
) -> None:
    """Change the options given and leave the rest (any of --backoff, --max-retries and --delay-seconds sets
    the whole retry policy)."""
    schedule = schedule_of(cron, timezone, every_minutes)
    refuse_both("no_folder", no_folder, folder is not None or folder_id is not None, "--folder or --folder-id")
    refuse_both("no_urls", no_urls, bool(urls), "--url")
    refuse_both("no_schedule", no_schedule, schedule is not None, "--cron, --timezone, --every-minutes")
    refuse_both("default_max_runtime", default_max_runtime, max_runtime_seconds is not None, "--max-runtime-seconds")
    refuse_both("default_queue", default_queue, worker_queue is not None, "--worker-queue (--queue)")
    changes = PipelineChanges(
        name=keep(name),
        save_to_kb=keep(save_to_kb),
        connector_id=keep(connector_id),
        enabled=keep(enabled),
        folder=None if no_folder else keep(folder),
        folder_id=keep(folder_id),
        urls=None if no_urls else keep(list(urls) or None),
        schedule=None if no_schedule else keep(schedule),
        retry=keep(retry_of(backoff, max_retries, delay_seconds)),
        max_runtime_seconds=None if default_max_runtime else keep(max_runtime_seconds),
        worker_queue=None if default_queue else keep(worker_queue),
    )
    from pipelines_dagster import services

    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        updated = services.update_pipeline(
            session, dagster_instance(settings), workspace_id=workspace_id, pipeline_id=pipeline_id, changes=changes
        )
        shown = read_pipeline(session, updated)
    emit(as_json, shown, describe(shown))


@pipeline.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def pipeline_list(workspace_id: int, as_json: bool) -> None:
    """The workspace's pipelines, connectors' own periodic indexing included."""
    with open_sessions(load_settings())() as session:
        get_workspace(session, workspace_id)
        pipelines = list_pipelines(session, workspace_id=workspace_id)
        listed = PipelineList.of(pipelines, schedule_triggers(session, [p.id for p in pipelines]))
    text = "\n".join(describe(shown) for shown in listed.pipelines) or f"workspace {workspace_id} has no pipelines"
    emit(as_json, listed, text)


@pipeline.command("show")
@pipeline_ref
@json_option
@user_errors
def pipeline_show(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """One pipeline: its settings, schedule and retry policy."""
    with open_sessions(load_settings())() as session:
        pipeline = get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        shown = PipelineOut.of(pipeline, schedule_triggers(session, [pipeline.id]).get(pipeline.id))
    emit(as_json, shown, describe(shown))


def _set_enabled(workspace_id: int, pipeline_id: int, enabled: bool, as_json: bool) -> None:
    """Prints the pipeline as `PUT .../pipelines/{id}` with `enabled` answers."""
    from pipelines_dagster import services

    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        switched = services.set_pipeline_enabled(
            session, dagster_instance(settings), workspace_id=workspace_id, pipeline_id=pipeline_id, enabled=enabled
        )
        shown = read_pipeline(session, switched)
    emit(as_json, shown, f"pipeline {pipeline_id} {'enabled' if enabled else 'disabled'}")


@pipeline.command("enable")
@pipeline_ref
@json_option
@user_errors
def pipeline_enable(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """Switch a pipeline on (its connector's own periodic indexing goes off)."""
    _set_enabled(workspace_id, pipeline_id, True, as_json)


@pipeline.command("disable")
@pipeline_ref
@json_option
@user_errors
def pipeline_disable(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """Switch a pipeline off; no trigger starts it until it is enabled again."""
    _set_enabled(workspace_id, pipeline_id, False, as_json)


@pipeline.command("delete")
@pipeline_ref
@json_option
@user_errors
def pipeline_delete(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """Delete a pipeline, its triggers and its Dagster partition (run history stays in Dagster)."""
    from pipelines_dagster import services

    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        services.delete_pipeline(
            session, dagster_instance(settings), workspace_id=workspace_id, pipeline_id=pipeline_id
        )
    emit(as_json, DeletedOut(id=pipeline_id, deleted=True), f"pipeline {pipeline_id} deleted")


# Run-now lives with the run history (runs.py), and is a command of this group.
pipeline.add_command(run_now)
