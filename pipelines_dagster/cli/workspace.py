"""`pipelines-dagster workspace` and `templates`: workspaces with their API tokens, and the built-in pipeline
templates seeded into each."""

from __future__ import annotations

import click
import sqlalchemy as sa

from pipelines_dagster.api.schemas.templates import (
    RetentionScheduleOut,
    SeedOut,
    TemplateList,
    TemplateOut,
    WorkspaceSeedOut,
)
from pipelines_dagster.api.schemas.workspaces import NewWorkspaceOut, WorkspaceList, WorkspaceOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.cli.common import ID, emit, json_option, open_sessions, plural, user_errors
from pipelines_dagster.core.catalog import workspaces
from pipelines_dagster.core.catalog.templates import TEMPLATES
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import load_settings


@click.group()
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
        shown = NewWorkspaceOut.of(
            services.create_workspace(session, dagster_instance(settings), name=name, owner_user_id=owner)
        )
    emit(
        as_json,
        shown,
        f"workspace {shown.id} created, with the built-in pipeline templates (disabled; "
        f"`pipelines-dagster templates list`)\nAPI token {shown.token.name!r} (shown once, store it now): "
        f"{shown.api_token}\nanother one, any time: pipelines-dagster token create --workspace {shown.id} --name NAME",
    )


def _workspace_line(shown: WorkspaceOut) -> str:
    owned = f"\towns {', '.join(shown.owned_hosts)}" if shown.owned_hosts else ""
    return f"{shown.id}\t{shown.name}\towner {shown.owner}\t{plural(shown.live_tokens, 'live token')}{owned}"


@workspace.command("list")
@json_option
@user_errors
def workspace_list(as_json: bool) -> None:
    """Every workspace of the deployment: id, name, owner and how many live API tokens it has."""
    with open_sessions(load_settings())() as session:
        rows = workspaces.list_workspaces(session)
        counts = workspaces.live_token_counts(session, [row.id for row in rows])
        shown = WorkspaceList(workspaces=[WorkspaceOut.of(row, live_tokens=counts.get(row.id, 0)) for row in rows])
    emit(
        as_json,
        shown,
        "\n".join(map(_workspace_line, shown.workspaces))
        or "no workspaces yet; `pipelines-dagster workspace create --name NAME --owner USER` makes one",
    )


@workspace.command("update")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option(
    "--owned-host",
    "owned_hosts",
    multiple=True,
    help="A host the workspace owns (docs.example.com), on which its connectors may ignore robots.txt; repeat for "
    "more. Replaces the hosts it had.",
)
@click.option("--no-owned-hosts", is_flag=True, help="It owns no host: every crawl obeys robots.txt again.")
@json_option
@user_errors
def workspace_update(workspace_id: int, owned_hosts: tuple[str, ...], no_owned_hosts: bool, as_json: bool) -> None:
    """Declare the hosts the workspace owns, an operator's word that its connectors may crawl them ignoring
    robots.txt (`connector update --robots ignore`). The API has no route for it: a workspace's token cannot
    declare a host its own. A host given up is obeyed again from its next crawl on."""
    if bool(owned_hosts) == no_owned_hosts:
        raise click.UsageError("give --owned-host (repeatable) or --no-owned-hosts")
    with transaction(open_sessions(load_settings())) as session:
        row = workspaces.set_owned_hosts(session, workspace_id, list(owned_hosts))
        shown = WorkspaceOut.of(row, live_tokens=workspaces.live_token_counts(session, [row.id]).get(row.id, 0))
    emit(as_json, shown, _workspace_line(shown))


@workspace.command("show")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def workspace_show(workspace_id: int, as_json: bool) -> None:
    """One workspace: id, name, owner, created, live API tokens (`token list` names them)."""
    with open_sessions(load_settings())() as session:
        row = workspaces.get_workspace(session, workspace_id)
        shown = WorkspaceOut.of(row, live_tokens=workspaces.live_token_counts(session, [row.id]).get(row.id, 0))
    emit(as_json, shown, f"{_workspace_line(shown)}\tcreated {shown.created_at.isoformat()}")


@click.group()
def templates() -> None:
    """Built-in pipeline templates, seeded disabled into every workspace."""


@templates.command("list")
@json_option
def templates_list(as_json: bool) -> None:
    """The templates: what each does and how it crawls."""
    shown = TemplateList(templates=[TemplateOut.of(template) for template in TEMPLATES])
    emit(
        as_json,
        shown,
        "\n".join(
            f"{entry.key}\t{entry.name}: {entry.description} ({entry.mode} crawl, render {entry.render}, "
            f"{'into the KB' if entry.save_to_kb else 'raw crawls only'}, schedule {entry.schedule}, seeded off)"
            for entry in shown.templates
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
    shown = SeedOut(
        workspaces=[WorkspaceSeedOut.of(report) for report in reports],
        retention_schedule=RetentionScheduleOut(name=RETENTION_SCHEDULE, restarted=keep_retention_on(instance)),
    )
    lines = [
        f"workspace {seeded.workspace_id}: {len(seeded.created)} templates added {seeded.created}, "
        f"{len(seeded.kept)} kept as they were"
        for seeded in shown.workspaces
    ]
    restarted = shown.retention_schedule.restarted
    lines.append(
        f"retention schedule {RETENTION_SCHEDULE}: " + ("was stopped, switched back on" if restarted else "on")
    )
    emit(as_json, shown, "\n".join(lines))
