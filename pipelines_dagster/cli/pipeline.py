"""The `pipelines-dagster` command: set up the app database and its workspaces, connectors, pipelines."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import create_engine, session_factory, transaction
from pipelines_dagster.app_db.migrate import DatabaseNotReadyError, require_current, upgrade
from pipelines_dagster.app_db.models import ConnectorType, DeliveryStatus, NotificationEndpoint, Pipeline
from pipelines_dagster.core.catalog.pipelines import (
    KEEP,
    Keep,
    PipelineChanges,
    SystemManagedError,
    get_pipeline,
    get_workspace,
    initial_urls,
    list_pipelines,
    schedule_triggers,
    set_pipeline_enabled,
    update_pipeline,
)
from pipelines_dagster.core.catalog.retry import (
    DEFAULT_BACKOFF,
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_RETRIES,
    MAX_RETRIES,
    RetryPolicy,
    validate_retry_policy,
)
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.crawl.site.config import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGES,
    SITE_KEY,
    CrawlMode,
    crawl_mode,
    site_for,
)
from pipelines_dagster.core.errors import InvalidInputError, NotFoundError
from pipelines_dagster.core.ledger.billing import Billing, UnknownWorkspaceError
from pipelines_dagster.core.security.signing import DEFAULT_ROTATION_OVERLAP_SECONDS
from pipelines_dagster.core.triggers.webhooks import (
    EventType,
    create_event_trigger,
    create_manual_trigger,
    create_webhook_trigger,
    emit_event,
    pipeline_triggers,
    rotate_signing_secret,
    set_trigger_enabled,
)
from pipelines_dagster.core.validation import MAX_ID
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.notifications import endpoints as notifications
from pipelines_dagster.notifications.payloads import NotificationEvent
from pipelines_dagster.settings import Settings, SettingsError, load_settings

# Dagster (services, demo, the instance, run history) and the web stack are imported on use by the
# commands that need them: `pipeline run` and the catalog commands start without loading either.
# --json prints the API's own models, so the field names are the API's.
if TYPE_CHECKING:
    from pipelines_dagster.api.schemas import notifications as api_notifications
    from pipelines_dagster.api.schemas import pipelines as schemas
    from pipelines_dagster.api.schemas.triggers import TriggerOut
    from pipelines_dagster.notifications.destination import DestinationGuard

REPO_DIR = Path(__file__).resolve().parents[2]
T = TypeVar("T")

USER_ERRORS = (
    InvalidInputError,
    NotFoundError,
    SystemManagedError,
    UnknownWorkspaceError,
    DatabaseNotReadyError,
    SettingsError,
)

# A row id, refused by click when no row can have it: a larger integer would overflow the id columns.
ID = click.IntRange(1, MAX_ID)

json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of text.")

# The catalog names fields as the HTTP API does; these are the options that set them here.
OPTION_OF_FIELD = {
    "connector_id": "connector",
    "urls": "url",
    "schedule.cron": "cron",
    "schedule.timezone": "timezone",
    "schedule.every_minutes": "every_minutes",
    "retry_policy.backoff": "retry_backoff",
    "retry_policy.max_retries": "retry_max",
    "retry_policy.delay_seconds": "retry_delay",
    "max_runtime_seconds": "max_runtime",
    "event_types": "event",
    "pipeline_ids": "pipeline",
    "credits_below_micros": "credits_below",
}


def user_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn errors a user can fix into a one-line message and a non-zero exit."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InvalidInputError as exc:
            option = OPTION_OF_FIELD.get(exc.field, exc.field).replace("_", "-")
            raise click.ClickException(f"--{option}: {exc.message}") from None
        except USER_ERRORS as exc:
            raise click.ClickException(str(exc)) from None
        except sa.exc.OperationalError as exc:
            raise click.ClickException(f"cannot reach the app database: {exc.orig}") from None
        except sa.exc.IntegrityError:
            # A duplicate is refused by its check, also when a concurrent command committed it first; what
            # lands here lost another race with a concurrent change.
            raise click.ClickException("a concurrent change touched what this command writes; run it again") from None

    return wrapper


def emit(as_json: bool, payload: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(payload) if as_json else text)


def open_engine(settings: Settings, *, migrated: bool = True) -> sa.Engine:
    engine = create_engine(settings.resolved_database_url)
    if migrated:
        require_current(engine)
    return engine


def open_sessions(settings: Settings) -> sessionmaker[Session]:
    return session_factory(open_engine(settings))


@click.group()
def main() -> None:
    """Web-crawl pipelines for a knowledge base, orchestrated by Dagster."""


@main.group()
def db() -> None:
    """The app database."""


@db.command("upgrade")
@json_option
@user_errors
def db_upgrade(as_json: bool) -> None:
    """Create or migrate the app database to the latest schema."""
    settings = load_settings()
    engine = open_engine(settings, migrated=False)
    upgrade(engine)
    url = engine.url.render_as_string(hide_password=True)
    emit(as_json, {"database": url, "status": "current"}, f"app database is current: {url}")


@main.group()
def workspace() -> None:
    """Workspaces and their API tokens."""


@workspace.command("create")
@click.option("--name", required=True, help="Display name of the workspace.")
@click.option("--owner", required=True, help="User id of the owner, who is billed for crawls.")
@json_option
@user_errors
def workspace_create(name: str, owner: str, as_json: bool) -> None:
    """Create a workspace, with the built-in pipeline templates (disabled), and print its API token
    (shown this once only)."""
    from pipelines_dagster import services

    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        created = services.create_workspace(session, dagster_instance(settings), name=name, owner_user_id=owner)
        ws = created.workspace
        payload = {"id": ws.id, "name": ws.name, "owner": ws.owner_user_id, "api_token": created.api_token}
    emit(
        as_json,
        payload,
        f"workspace {payload['id']} created, with the built-in pipeline templates (disabled; "
        f"`pipelines-dagster templates list`)\nAPI token (shown once, store it now): {payload['api_token']}",
    )


@main.group()
def templates() -> None:
    """Built-in pipeline templates, seeded disabled into every workspace."""


@templates.command("list")
@json_option
def templates_list(as_json: bool) -> None:
    """The templates: what each does and how it crawls."""
    from pipelines_dagster.core.catalog.templates import TEMPLATES

    shown = [
        {
            "key": template.key,
            "name": template.name,
            "description": template.description,
            "save_to_kb": template.save_to_kb,
            "folder": template.folder,
            "mode": template.mode,
            "schedule": template.schedule.describe(),
            "events": [event.value for event in template.events],
        }
        for template in TEMPLATES
    ]
    emit(
        as_json,
        {"templates": shown},
        "\n".join(
            f"{entry['key']}\t{entry['name']}: {entry['description']} ({entry['mode']} crawl, "
            f"{'into the KB' if entry['save_to_kb'] else 'raw crawls only'}, schedule {entry['schedule']}, seeded off)"
            for entry in shown
        ),
    )


@templates.command("seed")
@click.option("--workspace", "workspace_id", type=ID, default=None, help="Only this workspace [every workspace].")
@json_option
@user_errors
def templates_seed(workspace_id: int | None, as_json: bool) -> None:
    """Give each workspace the templates it lacks (disabled, schedules off), keeping the ones it has as
    they are; and switch the retention schedule back on if it was stopped: it is garbage collection."""
    from pipelines_dagster import services
    from pipelines_dagster.app_db.models import Workspace
    from pipelines_dagster.schedules import RETENTION_SCHEDULE, keep_retention_on

    settings = load_settings()
    sessions, instance = open_sessions(settings), dagster_instance(settings)
    if workspace_id is None:
        with sessions() as session:
            workspace_ids = list(session.scalars(sa.select(Workspace.id).order_by(Workspace.id)))
    else:
        workspace_ids = [workspace_id]
    reports = []
    for one in workspace_ids:  # a transaction each: a workspace seeded stays seeded
        with transaction(sessions) as session:
            reports.append(services.seed_workspace(session, instance, one))
    restarted = keep_retention_on(instance)
    payload = {
        "workspaces": [
            {"workspace_id": report.workspace_id, "created": report.created, "kept": report.kept} for report in reports
        ],
        "retention_schedule": {"name": RETENTION_SCHEDULE, "restarted": restarted},
    }
    lines = [
        f"workspace {report.workspace_id}: {len(report.created)} templates added {report.created}, "
        f"{len(report.kept)} kept as they were"
        for report in reports
    ]
    lines.append(
        f"retention schedule {RETENTION_SCHEDULE}: " + ("was stopped, switched back on" if restarted else "on")
    )
    emit(as_json, payload, "\n".join(lines))


@main.group()
def connector() -> None:
    """Connectors: where a pipeline's content comes from."""


def read_url_file(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@connector.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option(
    "--type",
    "connector_type",
    required=True,
    type=click.Choice([member.value for member in ConnectorType]),
)
@click.option("--url", "urls", multiple=True, help="A URL to crawl; repeat for more.")
@click.option(
    "--url-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file with one URL per line (blank lines and # comments ignored).",
)
@click.option("--name", default=None)
@click.option(
    "--mode", type=click.Choice([mode.value for mode in CrawlMode]), default=None, help="list (default) or site."
)
@click.option("--site", "sites", multiple=True, help="A site crawl's start URL; repeat for more. Implies --mode site.")
@click.option(
    "--max-depth", type=int, default=None, help=f"Site crawl: links followed from a start URL [{DEFAULT_MAX_DEPTH}]."
)
@click.option("--max-pages", type=int, help=f"Site crawl: pages fetched at most [{DEFAULT_MAX_PAGES}].")
@click.option("--include", multiple=True, help="Site crawl: only paths matching this glob (/docs/**); repeatable.")
@click.option("--exclude", multiple=True, help="Site crawl: never paths matching this glob; repeatable.")
@click.option("--subdomains", is_flag=True, help="Site crawl: the start URLs' whole registrable domains.")
@click.option("--drop-query-params", default=None, help="Site crawl: query parameters to drop (a,b) or all.")
@click.option(
    "--index-every-minutes",
    type=int,
    default=None,
    help="The connector's own periodic indexing into the KB root (off while a pipeline owns it).",
)
@json_option
@user_errors
def connector_create(
    workspace_id: int,
    connector_type: str,
    urls: tuple[str, ...],
    url_file: Path | None,
    name: str | None,
    index_every_minutes: int | None,
    mode: str | None,
    sites: tuple[str, ...],
    max_depth: int | None,
    max_pages: int | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    subdomains: bool,
    drop_query_params: str | None,
    as_json: bool,
) -> None:
    """Create a connector; a webcrawler connector needs --url or --url-file (list mode), or --site (site mode)."""
    from pipelines_dagster import services

    if urls and url_file:
        raise InvalidInputError("url_file", "give --url or --url-file, not both")
    all_urls = read_url_file(url_file) if url_file else list(urls)
    settings = load_settings()
    site = site_for(
        mode,
        start_urls=sites,
        max_depth=max_depth,
        max_pages=max_pages,
        include=include,
        exclude=exclude,
        subdomains=subdomains,
        drop_query_params=drop_query_params,
        max_pages_cap=settings.site_max_pages_cap,
    )
    with transaction(open_sessions(settings)) as session:
        created = services.create_connector(
            session,
            dagster_instance(settings),
            workspace_id=workspace_id,
            connector_type=connector_type,
            urls=all_urls,
            name=name,
            index_every_minutes=index_every_minutes,
            site=site,
        )
        created_urls = initial_urls(created) or []
        payload = {
            "id": created.id,
            "workspace_id": created.workspace_id,
            "type": created.connector_type,
            "urls": created_urls,
            "mode": crawl_mode(created.config).value,
            "site": created.config.get(SITE_KEY),
            "periodic_indexing_enabled": created.periodic_indexing_enabled,
            "pipeline_ids": [p.id for p in created.pipelines],
        }
    what = f"a site crawl of {', '.join(site.start_urls)}" if site else f"{len(created_urls)} URLs"
    emit(as_json, payload, f"connector {payload['id']} created with {what}")


@main.group()
def pipeline() -> None:
    """Pipelines: what to do with a connector's crawl, and when."""


def workspace_ref(argument: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--workspace ID <ARGUMENT>`: pipelines and notification endpoints are always named within their workspace."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.argument(argument, type=ID)(command)
        return click.option("--workspace", "workspace_id", required=True, type=ID)(command)

    return decorate


pipeline_ref = workspace_ref("pipeline_id")


def schedule_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--cron", default=None, help="Cron expression, five fields; needs --timezone."),
            click.option("--timezone", default=None, help="IANA timezone of --cron, e.g. Europe/Stockholm."),
            click.option("--every-minutes", type=int, default=None, help="Run every N minutes instead of a cron."),
        ]
    ):
        command = option(command)
    return command


def schedule_of(cron: str | None, timezone: str | None, every_minutes: int | None) -> ScheduleSpec | None:
    if cron is None and timezone is None and every_minutes is None:
        return None
    return ScheduleSpec(cron=cron, timezone=timezone, every_minutes=every_minutes)


def retry_options(*, defaults: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--retry-backoff/--retry-max/--retry-delay`; without defaults an option left out is None."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(
            [
                click.option(
                    "--retry-backoff",
                    default=DEFAULT_BACKOFF.value if defaults else None,
                    show_default=defaults,
                    help="How a failed crawl is retried: linear or exponential.",
                ),
                click.option(
                    "--retry-max",
                    default=DEFAULT_MAX_RETRIES if defaults else None,
                    show_default=defaults,
                    type=int,
                    help=f"Retries of a failed crawl, 0 to {MAX_RETRIES}.",
                ),
                click.option(
                    "--retry-delay",
                    default=DEFAULT_DELAY_SECONDS if defaults else None,
                    show_default=defaults,
                    type=float,
                    help="Seconds before the first retry; linear adds it per retry, exponential doubles it.",
                ),
            ]
        ):
            command = option(command)
        return command

    return decorate


def retry_of(backoff: str | None, max_retries: int | None, delay: float | None) -> RetryPolicy | None:
    """The policy the options give, as a whole: an option left out takes its default, as in the API."""
    if backoff is None and max_retries is None and delay is None:
        return None
    return validate_retry_policy(
        backoff=DEFAULT_BACKOFF.value if backoff is None else backoff,
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
        delay_seconds=DEFAULT_DELAY_SECONDS if delay is None else delay,
    )


max_runtime_option = click.option(
    "--max-runtime",
    "max_runtime",
    type=int,
    default=None,
    help="Seconds one run may take (10 to 604800); a crawl past it is continued by a new run from the pages "
    "it stored. Default: the deployment's maximum runtime.",
)


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
    retry_backoff: str,
    retry_max: int,
    retry_delay: float,
    max_runtime: int | None,
    as_json: bool,
) -> None:
    """Create a pipeline over a connector, optionally on a schedule."""
    from pipelines_dagster import services
    from pipelines_dagster.api.schemas import pipelines as schemas

    retry = retry_of(retry_backoff, retry_max, retry_delay)
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
            max_runtime_seconds=max_runtime,
        )
        trigger = schedule_triggers(session, [created.id]).get(created.id)
        payload = {
            "id": created.id,
            "workspace_id": created.workspace_id,
            "connector_id": created.connector_id,
            "name": created.name,
            "save_to_kb": created.save_to_kb,
            "destination_folder_id": created.destination_folder_id,
            "enabled": created.enabled,
            "next_fire_at": trigger.next_fire_at.isoformat() if trigger and trigger.next_fire_at else None,
            "retry_policy": schemas.RetryPolicyOut.of(RetryPolicy.of(created)).model_dump(mode="json"),
            "max_runtime_seconds": created.max_runtime_seconds,
        }
    when = f", next run {payload['next_fire_at']}" if payload["next_fire_at"] else ""
    emit(as_json, payload, f"pipeline {payload['id']} created{when}")


def keep(value: T | None) -> T | Keep:
    """An update option left out keeps the pipeline's value."""
    return KEEP if value is None else value


def refuse_both(flag: str, clear: bool, given: bool, options: str) -> None:
    if clear and given:
        raise InvalidInputError(flag, f"give {options} or --{flag.replace('_', '-')}, not both")


def describe(shown: schemas.PipelineOut) -> str:
    """One line per pipeline: id, name, state, schedule."""
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
    return f"{shown.id}\t{shown.name}\t{state}, {when}{managed}"


def show_pipeline(session: Session, pipeline: Pipeline, as_json: bool) -> None:
    from pipelines_dagster.api.schemas import pipelines as schemas

    session.flush()
    session.refresh(pipeline)
    shown = schemas.PipelineOut.of(pipeline, schedule_triggers(session, [pipeline.id]).get(pipeline.id))
    emit(as_json, shown.model_dump(mode="json"), describe(shown))


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
    retry_backoff: str | None,
    retry_max: int | None,
    retry_delay: float | None,
    max_runtime: int | None,
    default_max_runtime: bool,
    as_json: bool,
) -> None:
    """Change the options given and leave the rest (any --retry option sets the whole policy)."""
    schedule = schedule_of(cron, timezone, every_minutes)
    refuse_both("no_folder", no_folder, folder is not None or folder_id is not None, "--folder or --folder-id")
    refuse_both("no_urls", no_urls, bool(urls), "--url")
    refuse_both("no_schedule", no_schedule, schedule is not None, "--cron, --timezone, --every-minutes")
    refuse_both("default_max_runtime", default_max_runtime, max_runtime is not None, "--max-runtime")
    changes = PipelineChanges(
        name=keep(name),
        save_to_kb=keep(save_to_kb),
        connector_id=keep(connector_id),
        enabled=keep(enabled),
        folder=None if no_folder else keep(folder),
        folder_id=keep(folder_id),
        urls=None if no_urls else keep(list(urls) or None),
        schedule=None if no_schedule else keep(schedule),
        retry=keep(retry_of(retry_backoff, retry_max, retry_delay)),
        max_runtime_seconds=None if default_max_runtime else keep(max_runtime),
    )
    with transaction(open_sessions(load_settings())) as session:
        updated = update_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id, changes=changes)
        show_pipeline(session, updated, as_json)


@pipeline.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def pipeline_list(workspace_id: int, as_json: bool) -> None:
    """The workspace's pipelines, connectors' own periodic indexing included."""
    from pipelines_dagster.api.schemas import pipelines as schemas

    with open_sessions(load_settings())() as session:
        get_workspace(session, workspace_id)
        pipelines = list_pipelines(session, workspace_id=workspace_id)
        listed = schemas.PipelineList.of(pipelines, schedule_triggers(session, [p.id for p in pipelines]))
    text = "\n".join(describe(shown) for shown in listed.pipelines) or f"workspace {workspace_id} has no pipelines"
    emit(as_json, listed.model_dump(mode="json"), text)


@pipeline.command("show")
@pipeline_ref
@json_option
@user_errors
def pipeline_show(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """One pipeline: its settings, schedule and retry policy."""
    with open_sessions(load_settings())() as session:
        show_pipeline(session, get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id), as_json)


def _set_enabled(workspace_id: int, pipeline_id: int, enabled: bool, as_json: bool) -> None:
    with transaction(open_sessions(load_settings())) as session:
        set_pipeline_enabled(session, workspace_id=workspace_id, pipeline_id=pipeline_id, enabled=enabled)
    state = "enabled" if enabled else "disabled"
    emit(as_json, {"id": pipeline_id, "enabled": enabled}, f"pipeline {pipeline_id} {state}")


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
    emit(as_json, {"id": pipeline_id, "deleted": True}, f"pipeline {pipeline_id} deleted")


@main.group()
def credits() -> None:
    """Crawl credit of a workspace."""


def _billing() -> Billing:
    settings = load_settings()
    return Billing(
        open_sessions(settings), enabled=settings.billing_enabled, micros_per_crawl=settings.micros_per_crawl
    )


@credits.command("grant")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--micros", required=True, type=click.IntRange(min=1), help="Micro-credits to add.")
@json_option
@user_errors
def credits_grant(workspace_id: int, micros: int, as_json: bool) -> None:
    """Add crawl credit to a workspace's account."""
    balance = _billing().grant(workspace_id, micros)
    emit(
        as_json,
        {"id": workspace_id, "workspace_id": workspace_id, "granted_micros": micros, "balance_micros": balance},
        f"workspace {workspace_id} balance: {balance} micros",
    )


@credits.command("show")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def credits_show(workspace_id: int, as_json: bool) -> None:
    """A workspace's balance, what crawls under way hold of it, and what is available to new runs."""
    from pipelines_dagster.api.schemas.credits import CreditsOut

    billing = _billing()
    shown = CreditsOut.of(billing.summary(workspace_id), billing_enabled=billing.enabled)
    off = "" if shown.billing_enabled else " (billing is off: crawls are not charged)"
    emit(
        as_json,
        {"workspace_id": workspace_id, **shown.model_dump()},
        f"workspace {workspace_id}: {shown.balance_micros} micros balance, {shown.held_micros} held by crawls under "
        f"way, {shown.available_micros} available{off}",
    )


@main.command()
@click.option("--once", is_flag=True, help="Crawl the demo site headless, print a JSON summary, exit.")
@click.option("--site-port", default=8765, show_default=True, help="Loopback port for the demo site.")
@click.option("--ui-port", default=3000, show_default=True, help="Port of the Dagster UI.")
@user_errors
def demo(once: bool, site_port: int, ui_port: int) -> None:
    """Seed a demo workspace over the example docs site, served on 127.0.0.1.

    Without --once, keeps the site up and starts `dagster dev` (UI and daemon) on
    the embedded default, so the demo partition can be materialized from the UI.
    """
    from pipelines_dagster import demo as demo_site

    try:
        _demo(demo_site, once=once, site_port=site_port, ui_port=ui_port)
    except (demo_site.DemoSiteMissingError, demo_site.SitePortBusyError) as exc:
        raise click.ClickException(str(exc)) from None


def _demo(demo_site: Any, *, once: bool, site_port: int, ui_port: int) -> None:
    settings = load_settings()
    engine = open_engine(settings, migrated=False)
    upgrade(engine)
    instance = dagster_instance(settings)
    sessions = session_factory(engine)
    if once:
        click.echo(json.dumps(demo_site.run_once(settings, sessions, instance, site_port=site_port), indent=2))
        return
    home = Path(instance.root_directory)
    if not (home / "dagster.yaml").exists():
        shutil.copy(REPO_DIR / "deploy" / "dagster.yaml", home / "dagster.yaml")
    with demo_site.serve_site(port=site_port) as base_url:
        seeded = demo_site.seed(sessions, instance, base_url)
        click.echo(f"demo site: {base_url}  (pipeline {seeded.pipeline_id}, workspace {seeded.workspace_id})")
        if seeded.api_token:
            click.echo(f"API token of the demo workspace (shown once): {seeded.api_token}")
        click.echo(
            f"Dagster UI: http://127.0.0.1:{ui_port} — Assets → crawl_results → Materialize, "
            f"partition {seeded.pipeline_id}"
        )
        allowed = demo_site.with_loopback_allowed(settings).crawler_allowed_networks
        env = {**os.environ, "PIPELINES_CRAWLER_ALLOWED_NETWORKS": allowed, "DAGSTER_HOME": str(home)}
        dagster = Path(sys.executable).with_name("dagster")
        command = [str(dagster), "dev", "-w", str(REPO_DIR / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(ui_port)]
        with contextlib.suppress(KeyboardInterrupt):
            subprocess.run(command, env=env, cwd=REPO_DIR, check=False)


@pipeline.command("run")
@pipeline_ref
@json_option
@user_errors
def pipeline_run_now(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """Run a pipeline now on the running Dagster (webserver at $PIPELINES_DAGSTER_URL); it needs an enabled
    manual trigger (`trigger list` shows it)."""
    # Imported on use, like uvicorn below: the GraphQL client and the web stack are
    # only needed by these two commands.
    from pipelines_dagster.core.run.engine import RunRefused
    from pipelines_dagster.launch import DagsterUnavailableError, LaunchFailedError, launch_pipeline_run

    try:
        run_id = launch_pipeline_run(open_sessions(load_settings()), workspace_id=workspace_id, pipeline_id=pipeline_id)
    except (RunRefused, DagsterUnavailableError, LaunchFailedError) as exc:
        raise click.ClickException(str(exc)) from None
    emit(as_json, {"id": run_id, "run_id": run_id, "pipeline_id": pipeline_id}, run_id)


@main.command("runs")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", required=True, type=ID)
@click.option("--limit", default=20, show_default=True, type=int, help="Runs per page, 1 to 100.")
@click.option("--cursor", default=None, help="`next_cursor` of the previous page.")
@json_option
@user_errors
def runs(workspace_id: int, pipeline_id: int, limit: int, cursor: str | None, as_json: bool) -> None:
    """A pipeline's runs from Dagster, newest first, as the API's run history lists them."""
    from pipelines_dagster.history import MAX_LIMIT, RunHistory
    from pipelines_dagster.settings import DAGSTER_URL_ENV

    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError("limit", f"must be from 1 to {MAX_LIMIT}")
    settings = load_settings()
    sessions = open_sessions(settings)
    with sessions() as session:
        get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    history = RunHistory(dagster_instance(settings), sessions, ui_base_url=os.environ.get(DAGSTER_URL_ENV))
    page = history.list_runs(workspace_id, pipeline_id=pipeline_id, limit=limit, cursor=cursor)
    lines = [
        f"{run.run_id}\t{run.status}\t{run.trigger or '-'}\t{run.created_at.isoformat()}"
        + (f"\t{run.error}" if run.error else "")
        for run in page.runs
    ]
    if page.next_cursor:
        lines.append(f"more: --cursor {page.next_cursor}")
    emit(as_json, page.model_dump(mode="json"), "\n".join(lines) or f"pipeline {pipeline_id} has no runs")


def _moment(context: click.Context, parameter: click.Parameter, value: str | None) -> datetime | None:
    """An ISO 8601 date or time option, in UTC when it names no offset."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter("give an ISO 8601 date or time, e.g. 2026-11-01 or 2026-11-01T09:00:00Z") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


@main.command("costs")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", default=None, type=ID, help="Only this pipeline's charges.")
@click.option("--since", default=None, callback=_moment, help="From this date or time (ISO 8601, UTC), included.")
@click.option("--until", default=None, callback=_moment, help="Up to this date or time, excluded; default now.")
@json_option
@user_errors
def costs(
    workspace_id: int, pipeline_id: int | None, since: datetime | None, until: datetime | None, as_json: bool
) -> None:
    """What the workspace's crawls were charged, from the ledger: the total and one line per pipeline."""
    from pipelines_dagster.api.schemas.costs import CostTotalsOut
    from pipelines_dagster.core.ledger.costs import cost_totals

    with open_sessions(load_settings())() as session:
        get_workspace(session, workspace_id)
        if pipeline_id is not None:
            get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        totals = cost_totals(session, workspace_id=workspace_id, since=since, until=until, pipeline_id=pipeline_id)
    lines = [f"{totals.micros} micro-credits in {plural(totals.charges, 'charge')}"]
    lines += [
        f"{cost.pipeline_id or '-'}\t{cost.pipeline_name or '(deleted)'}\t{cost.micros}\t"
        + plural(cost.charges, "charge")
        for cost in totals.pipelines
    ]
    emit(as_json, {"id": workspace_id, **CostTotalsOut.of(totals).model_dump(mode="json")}, "\n".join(lines))


@main.command("api")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@user_errors
def api(host: str, port: int) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) with uvicorn."""
    from pipelines_dagster.api.app import create_app
    from pipelines_dagster.edge.server import serve

    settings = load_settings()
    serve(create_app(settings=settings), host=host, port=port, settings=settings)


@main.group()
def trigger() -> None:
    """Webhook, event and manual triggers of a pipeline (schedules are set with `pipeline create`)."""


@trigger.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", required=True, type=ID)
@click.option(
    "--kind",
    required=True,
    type=click.Choice(["webhook", "event", "manual"]),
    help="manual: the trigger that lets `pipeline run` (and POST .../run) start the pipeline by hand; a pipeline "
    "gets one when it is made, so this adds one it lacks.",
)
@click.option(
    "--event-type",
    default=None,
    help="For --kind event, one of: " + ", ".join(member.value for member in EventType) + ".",
)
@click.option(
    "--signing",
    default=None,
    help="For --kind webhook: standard (Standard Webhooks, the default) or github (X-Hub-Signature-256 "
    "over the body, as GitHub sends; a repeated body is refused as a replay).",
)
@json_option
@user_errors
def trigger_create(
    workspace_id: int, pipeline_id: int, kind: str, event_type: str | None, signing: str | None, as_json: bool
) -> None:
    """Add a webhook trigger (prints its URL path and secret once), an event subscription or a manual trigger."""
    if (kind == "event") != (event_type is not None):
        raise InvalidInputError("event_type", "give --event-type with --kind event, and only then")
    if kind != "webhook" and signing is not None:
        raise InvalidInputError("signing", "give --signing with --kind webhook only")
    with transaction(open_sessions(load_settings())) as session:
        if kind == "manual":
            manual = create_manual_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
            payload = {"id": manual.id, "kind": kind}
            text = f"manual trigger {manual.id}: pipeline {pipeline_id} can be run by hand (`pipeline run`)"
        elif kind == "webhook":
            made = create_webhook_trigger(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, signing=signing or "standard"
            )
            payload = {
                "id": made.trigger.id,
                "kind": kind,
                "signing": made.trigger.signing,
                "webhook_path": f"/webhooks/{made.token}",
                "secret": made.secret,
            }
            how = (
                "headers webhook-id, webhook-timestamp and webhook-signature: v1,base64(HMAC-SHA256("
                f'"{{id}}.{{timestamp}}.{{body}}", {made.secret}))'
                if made.trigger.signing == "standard"
                else f"X-Hub-Signature-256: sha256=HMAC-SHA256(body, {made.secret})"
            )
            text = (
                f"webhook trigger {made.trigger.id} ({made.trigger.signing} signing): "
                f"POST /webhooks/{made.token}\nsign each delivery: {how} (shown once)"
            )
        else:
            assert event_type is not None  # checked against --kind above
            subscribed = create_event_trigger(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, event_type=event_type
            )
            payload = {"id": subscribed.id, "kind": kind, "event_type": subscribed.event_type}
            text = f"event trigger {subscribed.id}: pipeline {pipeline_id} runs on {subscribed.event_type}"
    emit(as_json, payload, text)


@trigger.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", required=True, type=ID)
@json_option
@user_errors
def trigger_list(workspace_id: int, pipeline_id: int, as_json: bool) -> None:
    """A pipeline's triggers: its schedule, webhooks and event subscriptions, on or off."""
    from pipelines_dagster.api.schemas.triggers import TriggerList, TriggerOut

    with open_sessions(load_settings())() as session:
        shown = TriggerList(
            triggers=[
                TriggerOut.of(row)
                for row in pipeline_triggers(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
            ]
        )
    emit(as_json, shown.model_dump(mode="json"), "\n".join(trigger_line(one) for one in shown.triggers))


def trigger_line(shown: TriggerOut) -> str:
    what = shown.schedule or shown.event_type or shown.signing or ""
    if shown.enabled:
        state = f"on, next {shown.next_fire_at.isoformat()}" if shown.next_fire_at else "on"
    else:
        state = f"off ({shown.disabled_reason})" if shown.disabled_reason else "off"
    return f"{shown.id}\t{shown.kind}\t{what}\t{state}"


def _switch_trigger(workspace_id: int, pipeline_id: int, trigger_id: int, enabled: bool, as_json: bool) -> None:
    from pipelines_dagster.api.schemas.triggers import TriggerOut

    with transaction(open_sessions(load_settings())) as session:
        shown = TriggerOut.of(
            set_trigger_enabled(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, trigger_id=trigger_id, enabled=enabled
            )
        )
    emit(as_json, shown.model_dump(mode="json"), trigger_line(shown))


def trigger_ref(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--workspace", "workspace_id", required=True, type=ID),
            click.option("--pipeline", "pipeline_id", required=True, type=ID),
            click.option("--trigger", "trigger_id", required=True, type=ID),
        ]
    ):
        command = option(command)
    return command


@trigger.command("enable")
@trigger_ref
@json_option
@user_errors
def trigger_enable(workspace_id: int, pipeline_id: int, trigger_id: int, as_json: bool) -> None:
    """Switch a trigger on (a template's schedule is seeded off); a schedule fires next at its next time.
    A trigger of a disabled pipeline fires into nothing until the pipeline is enabled."""
    _switch_trigger(workspace_id, pipeline_id, trigger_id, True, as_json)


@trigger.command("disable")
@trigger_ref
@json_option
@user_errors
def trigger_disable(workspace_id: int, pipeline_id: int, trigger_id: int, as_json: bool) -> None:
    """Switch a trigger off: it fires no more until enabled again (a manual trigger off: `pipeline run` refuses)."""
    _switch_trigger(workspace_id, pipeline_id, trigger_id, False, as_json)


@trigger.command("rotate-secret")
@trigger_ref
@click.option(
    "--overlap-seconds",
    default=DEFAULT_ROTATION_OVERLAP_SECONDS,
    show_default=True,
    type=int,
    help="How long the current secret keeps verifying next to the new one.",
)
@json_option
@user_errors
def trigger_rotate_secret(
    workspace_id: int, pipeline_id: int, trigger_id: int, overlap_seconds: int, as_json: bool
) -> None:
    """Give a standard-mode webhook trigger a new signing secret (printed once)."""
    with transaction(open_sessions(load_settings())) as session:
        rotated = rotate_signing_secret(
            session,
            workspace_id=workspace_id,
            pipeline_id=pipeline_id,
            trigger_id=trigger_id,
            overlap_seconds=overlap_seconds,
        )
        payload = {
            "id": trigger_id,
            "secret": rotated.secret,
            "previous_secret_expires_at": rotated.previous_expires_at.isoformat(),
        }
    emit(
        as_json,
        payload,
        f"trigger {trigger_id}: new secret {rotated.secret} (shown once); "
        f"the previous one verifies until {payload['previous_secret_expires_at']}",
    )


@main.group()
def event() -> None:
    """Domain events: what happened in a workspace, for event triggers to act on."""


@event.command("emit")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--type", "event_type", required=True, help="One of: " + ", ".join(m.value for m in EventType) + ".")
@click.option("--payload", default="{}", help="A JSON object, e.g. '{\"connector_id\": 3}'.")
@json_option
@user_errors
def event_emit(workspace_id: int, event_type: str, payload: str, as_json: bool) -> None:
    """Record a domain event; subscribed pipelines run on the event sensor's next tick."""
    try:
        body = json.loads(payload)
    except ValueError as exc:
        raise InvalidInputError("payload", f"not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise InvalidInputError("payload", "must be a JSON object")
    with transaction(open_sessions(load_settings())) as session:
        recorded = emit_event(session, workspace_id=workspace_id, event_type=event_type, payload=body)
        result = {"id": recorded.id, "event_type": recorded.event_type}
    emit(as_json, result, f"event {result['id']} recorded")


@main.group()
def notification() -> None:
    """Notification endpoints: URLs that hear, as signed Standard Webhooks, of runs ending, pages
    changing and credit running low."""


endpoint_ref = workspace_ref("endpoint_id")


def destination_guard(settings: Settings) -> DestinationGuard:
    """Where notifications may go: the crawler's network settings, as the deployment's resource has them."""
    from pipelines_dagster.resources import build_resources

    return build_resources(settings)["notifications"].guard()


def plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def describe_endpoint(shown: api_notifications.EndpointOut) -> str:
    """One line per endpoint: id, URL, state, what it hears of."""
    state = "enabled" if shown.enabled else f"disabled ({shown.disabled_reason})"
    pipelines = (
        "all pipelines"
        if shown.pipeline_ids is None
        else "pipelines " + ", ".join(str(pipeline_id) for pipeline_id in shown.pipeline_ids)
    )
    credits = f", credits below {shown.credits_below_micros} micros" if shown.credits_below_micros is not None else ""
    label = f"\t{shown.description}" if shown.description else ""
    return f"{shown.id}\t{shown.url}\t{state}\t{', '.join(shown.event_types)} of {pipelines}{credits}{label}"


def describe_delivery(shown: api_notifications.NotificationDeliveryOut) -> str:
    """One line per delivery: id, event type, status, attempts, how the last attempt went, webhook-id."""
    if shown.last_error:
        last = shown.last_error
    elif shown.last_status_code is not None:
        last = f"HTTP {shown.last_status_code}"
    else:
        last = "not sent yet"
    attempts = plural(shown.attempts, "attempt")
    return f"{shown.id}\t{shown.event_type}\t{shown.status.value}\t{attempts}\t{last}\t{shown.message_id}"


def show_endpoint(endpoint: NotificationEndpoint, as_json: bool) -> None:
    from pipelines_dagster.api.schemas.notifications import EndpointOut

    shown = EndpointOut.of(endpoint)
    emit(as_json, shown.model_dump(mode="json"), describe_endpoint(shown))


@notification.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--url", required=True, help="Where to POST: an http(s) URL the crawler may reach.")
@click.option(
    "--event",
    "event_types",
    multiple=True,
    help="An event to hear of; repeat for more. One of: " + ", ".join(member.value for member in NotificationEvent),
)
@click.option("--pipeline", "pipeline_ids", multiple=True, type=ID, help="Only this pipeline's events; repeat.")
@click.option(
    "--credits-below",
    type=int,
    default=None,
    help="With credits.low, and only then: notify when a charge takes the balance under this many micro-credits.",
)
@click.option("--description", default=None, help="What the endpoint is for.")
@json_option
@user_errors
def notification_create(
    workspace_id: int,
    url: str,
    event_types: tuple[str, ...],
    pipeline_ids: tuple[int, ...],
    credits_below: int | None,
    description: str | None,
    as_json: bool,
) -> None:
    """Add a notification endpoint and print the secret its deliveries are signed with (shown once)."""
    from pipelines_dagster.api.schemas.notifications import EndpointOut, NewEndpointOut

    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        made = notifications.create_endpoint(
            session,
            destination_guard(settings),
            workspace_id=workspace_id,
            url=url,
            event_types=event_types,
            pipeline_ids=list(pipeline_ids) or None,
            credits_below_micros=credits_below,
            description=description,
        )
        shown = NewEndpointOut(**EndpointOut.of(made.endpoint).model_dump(), secret=made.secret)
    emit(
        as_json,
        shown.model_dump(mode="json"),
        f"notification endpoint {shown.id} created: {', '.join(shown.event_types)} to {shown.url}\n"
        "deliveries carry webhook-id, webhook-timestamp and webhook-signature (Standard Webhooks), "
        f"signed with {shown.secret} (shown once, store it now)",
    )


@notification.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def notification_list(workspace_id: int, as_json: bool) -> None:
    """The workspace's notification endpoints."""
    from pipelines_dagster.api.schemas.notifications import EndpointList, EndpointOut

    with open_sessions(load_settings())() as session:
        listed = EndpointList(
            endpoints=[
                EndpointOut.of(endpoint)
                for endpoint in notifications.list_endpoints(session, workspace_id=workspace_id)
            ]
        )
    text = "\n".join(describe_endpoint(shown) for shown in listed.endpoints)
    emit(
        as_json,
        {"id": workspace_id, **listed.model_dump(mode="json")},
        text or f"workspace {workspace_id} has no notification endpoints",
    )


@notification.command("show")
@endpoint_ref
@json_option
@user_errors
def notification_show(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """One notification endpoint: its URL, state and subscriptions."""
    with open_sessions(load_settings())() as session:
        show_endpoint(notifications.get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id), as_json)


@notification.command("delete")
@endpoint_ref
@json_option
@user_errors
def notification_delete(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Delete a notification endpoint with its deliveries and their log."""
    with transaction(open_sessions(load_settings())) as session:
        notifications.delete_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    emit(as_json, {"id": endpoint_id, "deleted": True}, f"notification endpoint {endpoint_id} deleted")


@notification.command("rotate-secret")
@endpoint_ref
@click.option(
    "--overlap-seconds",
    default=DEFAULT_ROTATION_OVERLAP_SECONDS,
    show_default=True,
    type=int,
    help="How long deliveries are signed with the current secret too, next to the new one.",
)
@json_option
@user_errors
def notification_rotate_secret(workspace_id: int, endpoint_id: int, overlap_seconds: int, as_json: bool) -> None:
    """Give a notification endpoint a new signing secret (printed once)."""
    from pipelines_dagster.api.schemas.notifications import EndpointOut, RotatedEndpointOut

    with transaction(open_sessions(load_settings())) as session:
        rotated = notifications.rotate_endpoint_secret(
            session, workspace_id=workspace_id, endpoint_id=endpoint_id, overlap_seconds=overlap_seconds
        )
        shown = RotatedEndpointOut(**EndpointOut.of(rotated.endpoint).model_dump(), secret=rotated.secret)
    previous = (
        f"deliveries are signed with the previous secret too until {shown.previous_secret_expires_at.isoformat()}"
        if shown.previous_secret_expires_at
        else "the previous secret signs no more"
    )
    emit(
        as_json,
        shown.model_dump(mode="json"),
        f"notification endpoint {endpoint_id}: new secret {shown.secret} (shown once); {previous}",
    )


def _set_endpoint_enabled(workspace_id: int, endpoint_id: int, enabled: bool, as_json: bool) -> None:
    with transaction(open_sessions(load_settings())) as session:
        show_endpoint(
            notifications.set_endpoint_enabled(
                session, workspace_id=workspace_id, endpoint_id=endpoint_id, enabled=enabled
            ),
            as_json,
        )


@notification.command("enable")
@endpoint_ref
@json_option
@user_errors
def notification_enable(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Switch a notification endpoint on again (its failure streak starts over); redrive what failed meanwhile."""
    _set_endpoint_enabled(workspace_id, endpoint_id, True, as_json)


@notification.command("disable")
@endpoint_ref
@json_option
@user_errors
def notification_disable(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Switch a notification endpoint off: nothing is queued to it, and its pending deliveries fail."""
    _set_endpoint_enabled(workspace_id, endpoint_id, False, as_json)


@notification.command("test")
@endpoint_ref
@json_option
@user_errors
def notification_test(workspace_id: int, endpoint_id: int, as_json: bool) -> None:
    """Send the endpoint a notification.test message now, enabled or not; exits non-zero when it is not taken."""
    from pipelines_dagster.api.schemas.notifications import NotificationDeliveryOut
    from pipelines_dagster.notifications.sender import Sender

    settings = load_settings()
    sessions = open_sessions(settings)
    with transaction(sessions) as session:
        url = notifications.get_endpoint(session, workspace_id=workspace_id, endpoint_id=endpoint_id).url
        delivery_id = notifications.queue_test(session, workspace_id=workspace_id, endpoint_id=endpoint_id)
    results = Sender(sessions, destination_guard(settings)).send_now([delivery_id])
    if not results:
        raise click.ClickException(
            f"test delivery {delivery_id} was taken by another sender; see `pipelines-dagster notification "
            f"deliveries --workspace {workspace_id} {endpoint_id}`"
        )
    [result] = results
    with sessions() as session:
        shown = NotificationDeliveryOut.of(
            notifications.get_delivery(
                session, workspace_id=workspace_id, endpoint_id=endpoint_id, delivery_id=delivery_id
            )
        )
    answer = f"HTTP {result.status_code}" if result.status_code is not None else "no answer"
    emit(
        as_json,
        shown.model_dump(mode="json"),
        f"notification endpoint {endpoint_id}: test delivery {delivery_id} (webhook-id {shown.message_id}) "
        f"to {url}: {answer} in {result.duration_ms} ms",
    )
    if not result.succeeded:
        raise click.ClickException(
            f"the endpoint did not take the test delivery ({result.error}); it is retried like any delivery, "
            "or fix the receiver and run `notification test` again"
        )


@notification.command("deliveries")
@endpoint_ref
@click.option(
    "--status",
    type=click.Choice([member.value for member in DeliveryStatus]),
    default=None,
    help="Only deliveries in this status.",
)
@click.option(
    "--limit", default=20, show_default=True, type=int, help=f"Deliveries shown, 1 to {notifications.MAX_LIMIT}."
)
@json_option
@user_errors
def notification_deliveries(workspace_id: int, endpoint_id: int, status: str | None, limit: int, as_json: bool) -> None:
    """An endpoint's deliveries, newest first: how each went, and its webhook-id."""
    from pipelines_dagster.api.schemas.notifications import NotificationDeliveryOut

    with open_sessions(load_settings())() as session:
        listed = [
            NotificationDeliveryOut.of(delivery)
            for delivery in notifications.list_deliveries(
                session, workspace_id=workspace_id, endpoint_id=endpoint_id, status=status, limit=limit
            )[0]
        ]
    emit(
        as_json,
        {"id": endpoint_id, "deliveries": [shown.model_dump(mode="json") for shown in listed]},
        "\n".join(describe_delivery(shown) for shown in listed)
        or f"notification endpoint {endpoint_id} has no deliveries",
    )


@notification.command("redrive")
@endpoint_ref
@click.option(
    "--delivery",
    "delivery_ids",
    multiple=True,
    type=ID,
    help="A delivery to send again, whatever its status; repeat. Without it, every failed delivery of the endpoint.",
)
@json_option
@user_errors
def notification_redrive(workspace_id: int, endpoint_id: int, delivery_ids: tuple[int, ...], as_json: bool) -> None:
    """Send deliveries again under their webhook-ids, from the start of the retry schedule."""
    from pipelines_dagster.api.schemas.notifications import RedriveOut

    try:
        with transaction(open_sessions(load_settings())) as session:
            count = notifications.redrive(
                session, workspace_id=workspace_id, endpoint_id=endpoint_id, delivery_ids=list(delivery_ids) or None
            )
    except notifications.EndpointDisabledError as exc:
        raise click.ClickException(str(exc)) from None
    emit(
        as_json,
        {"id": endpoint_id, **RedriveOut(redriven=count).model_dump(mode="json")},
        f"notification endpoint {endpoint_id}: {plural(count, 'delivery', 'deliveries')} queued again; "
        "the notification_sender sensor sends them on its next tick",
    )


# Last: the MCP server's module reads this one's helpers when its command runs.
from pipelines_dagster.mcp_server import mcp_command  # noqa: E402

main.add_command(mcp_command)
