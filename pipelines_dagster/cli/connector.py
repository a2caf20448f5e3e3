"""`pipelines-dagster connector`: where a pipeline's content comes from, a list of URLs or a site crawl, which
pages are rendered and the credentials of a site behind a login; created, listed, shown, changed and deleted as the
API's connector routes do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from sqlalchemy.orm import Session

from pipelines_dagster.api.schemas.common import DeletedOut
from pipelines_dagster.api.schemas.connectors import ConnectorList, ConnectorOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, ConnectorType
from pipelines_dagster.cli.common import (
    ID,
    Group,
    connector_ref,
    emit,
    json_option,
    open_sessions,
    user_errors,
)
from pipelines_dagster.cli.connector_options import auth_options, crawl_of, crawl_options, credentials_of
from pipelines_dagster.cli.pipeline_options import keep, refuse_both
from pipelines_dagster.core.catalog.changes import KEEP
from pipelines_dagster.core.catalog.connectors import (
    ConnectorChanges,
    get_connector,
    list_connectors,
    update_connector,
)
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.crawl.site.config import CrawlMode
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import load_settings


@click.group(cls=Group)
def connector() -> None:
    """Connectors: where a pipeline's content comes from."""


def read_connector(session: Session, connector: Connector) -> ConnectorOut:
    """The connector as the API answers a write: its timestamps and server defaults the database's."""
    session.flush()
    session.refresh(connector)
    return ConnectorOut.of(connector)


def describe(shown: ConnectorOut) -> str:
    """One line per connector: id, name, type, what it crawls and which pages it renders, its credentials by
    kind and name, its own periodic indexing."""
    render = f", render {shown.render}{'' if shown.render_chosen else f' ({shown.mode} default)'}"
    if shown.site is not None:
        what = f"site crawl of {', '.join(shown.site.start_urls)}{render}"
    elif shown.urls is not None:
        what = f"{len(shown.urls)} URL{'' if len(shown.urls) == 1 else 's'}{render}"
    else:
        what = "-"
    indexing = ", own periodic indexing" if shown.periodic_indexing_enabled else ""
    manners = f", user agent {shown.user_agent!r}" if shown.user_agent else ""
    manners += ", ignoring robots.txt on its owned hosts" if shown.robots == "ignore" else ""
    return f"{shown.id}\t{shown.name}\t{shown.type}\t{what}{manners}{_credentials(shown)}{indexing}"


def _credentials(shown: ConnectorOut) -> str:
    auth = shown.auth
    if auth is None:
        return ""
    kinds = [kind for kind, set_ in (("basic auth", auth.basic), ("bearer token", auth.bearer)) if set_]
    kinds += [f"header {name}" for name in auth.headers] + [f"cookie {name}" for name in auth.cookies]
    return f", credentials: {', '.join(kinds)}"


@connector.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option(
    "--type",
    "connector_type",
    required=True,
    type=click.Choice([member.value for member in ConnectorType]),
)
@crawl_options
@auth_options
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
    render: str | None,
    user_agent: str | None,
    robots: str | None,
    auth_basic: str | None,
    auth_bearer: str | None,
    headers: tuple[str, ...],
    cookies: tuple[str, ...],
    as_json: bool,
    **bounds: Any,
) -> None:
    """Create a connector; a webcrawler connector needs --url or --url-file (list mode), or --start-url (site
    mode). Credentials (--auth-basic, --auth-bearer, --header, --cookie) go only to its own hosts, and are
    stored sealed: no command or route shows them again."""
    from pipelines_dagster import services

    settings = load_settings()
    all_urls, site = crawl_of(settings, urls, url_file, mode, **bounds)
    credentials = credentials_of(auth_basic, auth_bearer, headers, cookies)
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
            render=render,
            credentials=credentials,
            keyring=settings.keyring(),
            user_agent=user_agent,
            robots=robots,
        )
        shown = read_connector(session, created)
    what = f"a site crawl of {', '.join(site.start_urls)}" if site else f"{len(shown.urls or [])} URLs"
    emit(as_json, shown, f"connector {shown.id} created with {what}")


@connector.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def connector_list(workspace_id: int, as_json: bool) -> None:
    """The workspace's connectors."""
    with open_sessions(load_settings())() as session:
        get_workspace(session, workspace_id)
        listed = ConnectorList(
            connectors=[ConnectorOut.of(row) for row in list_connectors(session, workspace_id=workspace_id)]
        )
    emit(as_json, listed, "\n".join(map(describe, listed.connectors)) or f"workspace {workspace_id} has no connectors")


@connector.command("show")
@connector_ref
@json_option
@user_errors
def connector_show(workspace_id: int, connector_id: int, as_json: bool) -> None:
    """One connector: what it crawls, a list of URLs or a site with its bounds."""
    with open_sessions(load_settings())() as session:
        shown = ConnectorOut.of(get_connector(session, workspace_id=workspace_id, connector_id=connector_id))
    emit(as_json, shown, describe(shown))


@connector.command("update")
@connector_ref
@crawl_options
@click.option("--default-render", is_flag=True, help="Render as the crawl mode's default again, and follow it.")
@click.option("--default-user-agent", is_flag=True, help="Send the crawler's user agent again.")
@auth_options
@click.option("--no-auth", is_flag=True, help="Clear its credentials.")
@json_option
@user_errors
def connector_update(
    workspace_id: int,
    connector_id: int,
    urls: tuple[str, ...],
    url_file: Path | None,
    name: str | None,
    mode: str | None,
    render: str | None,
    default_render: bool,
    user_agent: str | None,
    default_user_agent: bool,
    robots: str | None,
    auth_basic: str | None,
    auth_bearer: str | None,
    headers: tuple[str, ...],
    cookies: tuple[str, ...],
    no_auth: bool,
    as_json: bool,
    **bounds: Any,
) -> None:
    """Change the options given and leave the rest, as `PATCH .../connectors/{id}`: --url or --url-file make it a
    list crawl, --start-url a site crawl (the site as a whole: a bound left out takes its default), --render
    chooses which pages are rendered (--default-render: the crawl mode's again); any credential option replaces
    its credentials as a whole (--no-auth clears them), and a change that would send those it keeps to a new host
    is refused. Its pipelines crawl what it says from their next run on."""
    refuse_both("default_render", default_render, render is not None, "--render")
    refuse_both("default_user_agent", default_user_agent, user_agent is not None, "--user-agent")
    credentials = credentials_of(auth_basic, auth_bearer, headers, cookies)
    refuse_both("no_auth", no_auth, credentials is not None, "--auth-basic, --auth-bearer, --header, --cookie")
    settings = load_settings()
    new_urls, site = crawl_of(settings, urls, url_file, mode, **bounds)
    if mode == CrawlMode.LIST.value and not new_urls:
        raise InvalidInputError("urls", "a list crawl needs its URLs: give --url or --url-file with --mode list")
    render_change = None if default_render else keep(render)
    changes = ConnectorChanges(
        name=name,
        urls=new_urls or None,
        site=site,
        render=render_change,
        credentials=None if no_auth else credentials or KEEP,
        user_agent=None if default_user_agent else keep(user_agent),
        robots=keep(robots),
    )
    with transaction(open_sessions(settings)) as session:
        updated = update_connector(
            session,
            workspace_id=workspace_id,
            connector_id=connector_id,
            changes=changes,
            keyring=settings.keyring(),
        )
        shown = read_connector(session, updated)
    emit(as_json, shown, describe(shown))


@connector.command("delete")
@connector_ref
@json_option
@user_errors
def connector_delete(workspace_id: int, connector_id: int, as_json: bool) -> None:
    """Delete a connector with its own periodic indexing; refused while a pipeline crawls it (delete those
    pipelines or give them another connector with `pipeline update --connector` first). Its documents stay."""
    from pipelines_dagster import services

    settings = load_settings()
    with transaction(open_sessions(settings)) as session:
        services.delete_connector(
            session, dagster_instance(settings), workspace_id=workspace_id, connector_id=connector_id
        )
    emit(as_json, DeletedOut(id=connector_id, deleted=True), f"connector {connector_id} deleted")
