"""`pipelines-dagster connector`: where a pipeline's content comes from, a list of URLs or a site crawl."""

from __future__ import annotations

from pathlib import Path

import click

from pipelines_dagster.api.schemas.connectors import ConnectorOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import ConnectorType
from pipelines_dagster.cli.common import ID, emit, json_option, open_sessions, user_errors
from pipelines_dagster.core.crawl.site.config import DEFAULT_MAX_DEPTH, DEFAULT_MAX_PAGES, CrawlMode, site_for
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import load_settings


@click.group()
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
        # Timestamps and server defaults are the database's, as the API shows them.
        session.flush()
        session.refresh(created)
        shown = ConnectorOut.of(created)
    what = f"a site crawl of {', '.join(site.start_urls)}" if site else f"{len(shown.urls or [])} URLs"
    emit(as_json, shown, f"connector {shown.id} created with {what}")
