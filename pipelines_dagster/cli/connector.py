"""`pipelines-dagster connector`: where a pipeline's content comes from, a list of URLs or a site crawl, and which
pages are rendered; created, listed, shown, changed and deleted as the API's connector routes do."""

from __future__ import annotations

from collections.abc import Callable
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
    RenamedOption,
    connector_ref,
    emit,
    json_option,
    open_sessions,
    user_errors,
)
from pipelines_dagster.cli.pipeline_options import keep, refuse_both
from pipelines_dagster.core.catalog.connectors import (
    ConnectorChanges,
    get_connector,
    list_connectors,
    update_connector,
)
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.crawl.render.rule import RenderMode
from pipelines_dagster.core.crawl.site.config import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGES,
    CrawlMode,
    SiteConfig,
    site_for,
)
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import Settings, load_settings


@click.group(cls=Group)
def connector() -> None:
    """Connectors: where a pipeline's content comes from."""


def read_url_file(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def crawl_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """What a web connector crawls, as `create` and `update` take it: a list of URLs, or a site and its bounds."""
    for option in reversed(
        [
            click.option("--url", "urls", multiple=True, help="A URL to crawl; repeat for more."),
            click.option(
                "--url-file",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                help="A file with one URL per line (blank lines and # comments ignored).",
            ),
            click.option("--name", default=None),
            click.option(
                "--mode",
                type=click.Choice([mode.value for mode in CrawlMode]),
                default=None,
                help="list (default) or site.",
            ),
            click.option(
                "--start-url",
                "start_urls",
                cls=RenamedOption,
                formerly="--site",
                multiple=True,
                help="A site crawl's start URL; repeat for more. Implies --mode site.",
            ),
            click.option(
                "--max-depth",
                type=int,
                default=None,
                help=f"Site crawl: links followed from a start URL [{DEFAULT_MAX_DEPTH}].",
            ),
            click.option("--max-pages", type=int, help=f"Site crawl: pages fetched at most [{DEFAULT_MAX_PAGES}]."),
            click.option(
                "--include", multiple=True, help="Site crawl: only paths matching this glob (/docs/**); repeatable."
            ),
            click.option("--exclude", multiple=True, help="Site crawl: never paths matching this glob; repeatable."),
            click.option("--subdomains", is_flag=True, help="Site crawl: the start URLs' whole registrable domains."),
            click.option(
                "--drop-query-params", default=None, help="Site crawl: query parameters to drop (a,b) or all."
            ),
            click.option(
                "--render",
                type=click.Choice([mode.value for mode in RenderMode]),
                default=None,
                help="Which pages a headless browser renders: never, auto (pages whose plain fetch extracts thin "
                "text) or always. Default: the crawl mode's, never for a list and auto for a site.",
            ),
        ]
    ):
        command = option(command)
    return command


def crawl_of(
    settings: Settings, urls: tuple[str, ...], url_file: Path | None, mode: str | None, **bounds: Any
) -> tuple[list[str], SiteConfig | None]:
    """The URLs (from --url or --url-file) and the site the crawl options give; bounds are site_for's."""
    if urls and url_file:
        raise InvalidInputError("url_file", "give --url or --url-file, not both")
    site = site_for(mode, **bounds, max_pages_cap=settings.site_max_pages_cap)
    return read_url_file(url_file) if url_file else list(urls), site


def read_connector(session: Session, connector: Connector) -> ConnectorOut:
    """The connector as the API answers a write: its timestamps and server defaults the database's."""
    session.flush()
    session.refresh(connector)
    return ConnectorOut.of(connector)


def describe(shown: ConnectorOut) -> str:
    """One line per connector: id, name, type, what it crawls and which pages it renders, its own periodic
    indexing."""
    render = f", render {shown.render}{'' if shown.render_chosen else f' ({shown.mode} default)'}"
    if shown.site is not None:
        what = f"site crawl of {', '.join(shown.site.start_urls)}{render}"
    elif shown.urls is not None:
        what = f"{len(shown.urls)} URL{'' if len(shown.urls) == 1 else 's'}{render}"
    else:
        what = "-"
    indexing = ", own periodic indexing" if shown.periodic_indexing_enabled else ""
    return f"{shown.id}\t{shown.name}\t{shown.type}\t{what}{indexing}"


@connector.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option(
    "--type",
    "connector_type",
    required=True,
    type=click.Choice([member.value for member in ConnectorType]),
)
@crawl_options
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
    as_json: bool,
    **bounds: Any,
) -> None:
    """Create a connector; a webcrawler connector needs --url or --url-file (list mode), or --start-url (site
    mode)."""
    from pipelines_dagster import services

    settings = load_settings()
    all_urls, site = crawl_of(settings, urls, url_file, mode, **bounds)
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
    as_json: bool,
    **bounds: Any,
) -> None:
    """Change the options given and leave the rest, as `PATCH .../connectors/{id}`: --url or --url-file make it a
    list crawl, --start-url a site crawl (the site as a whole: a bound left out takes its default), --render
    chooses which pages are rendered (--default-render: the crawl mode's again). Its pipelines crawl what it says
    from their next run on."""
    refuse_both("default_render", default_render, render is not None, "--render")
    settings = load_settings()
    new_urls, site = crawl_of(settings, urls, url_file, mode, **bounds)
    if mode == CrawlMode.LIST.value and not new_urls:
        raise InvalidInputError("urls", "a list crawl needs its URLs: give --url or --url-file with --mode list")
    render_change = None if default_render else keep(render)
    changes = ConnectorChanges(name=name, urls=new_urls or None, site=site, render=render_change)
    with transaction(open_sessions(settings)) as session:
        shown = read_connector(
            session,
            update_connector(session, workspace_id=workspace_id, connector_id=connector_id, changes=changes),
        )
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
