"""The options that say what a web connector crawls (a list of URLs, or a site and its bounds, which pages are
rendered, the user agent it sends and whether it obeys robots.txt) and the credentials it sends to its own hosts,
which `connector create` and `connector update` share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from pipelines_dagster.cli.common import RenamedOption
from pipelines_dagster.core.crawl.credentials import Credentials
from pipelines_dagster.core.crawl.etiquette import RobotsMode
from pipelines_dagster.core.crawl.render.rule import RenderMode
from pipelines_dagster.core.crawl.site.config import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGES,
    CrawlMode,
    SiteConfig,
    site_for,
)
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.settings import Settings


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
            click.option(
                "--user-agent",
                default=None,
                help="The User-Agent its crawls send and read robots.txt as [the crawler's].",
            ),
            click.option(
                "--robots",
                type=click.Choice([mode.value for mode in RobotsMode]),
                default=None,
                help="obey (default) or ignore robots.txt: ignore only when every host of the connector is one its "
                "workspace owns (`workspace update --owned-host`).",
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


def auth_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The credentials of a site behind a login, given as a whole: `update` with any of them replaces all."""
    for option in reversed(
        [
            click.option(
                "--auth-basic", default=None, metavar="USER:PASSWORD", help="HTTP basic auth for the site's pages."
            ),
            click.option("--auth-bearer", default=None, metavar="TOKEN", help="A bearer token (Authorization header)."),
            click.option(
                "--header",
                "headers",
                multiple=True,
                metavar="'NAME: VALUE'",
                help="A header sent to the connector's own hosts, e.g. 'X-Api-Key: ...'; repeatable.",
            ),
            click.option(
                "--cookie", "cookies", multiple=True, metavar="NAME=VALUE", help="A cookie sent to them; repeatable."
            ),
        ]
    ):
        command = option(command)
    return command


def credentials_of(
    auth_basic: str | None, auth_bearer: str | None, headers: tuple[str, ...], cookies: tuple[str, ...]
) -> Credentials | None:
    """The credentials the auth options give, checked; None when none is given."""
    return Credentials.parse(basic=auth_basic, bearer=auth_bearer, headers=headers, cookies=cookies)
