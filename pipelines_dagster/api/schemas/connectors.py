"""A connector's bodies: a list crawl's URLs or a site crawl's start URLs and bounds, which pages are rendered,
the credentials of a site behind a login (written, never shown: only their kinds and names are), the user agent
its crawls send and whether they obey robots.txt, created and shown."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_core import PydanticCustomError

from pipelines_dagster.api.schemas.common import MAX_URLS, EveryMinutes, Name, RequestBody
from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.core.catalog.connector_credentials import shown_credentials
from pipelines_dagster.core.catalog.connectors import initial_urls
from pipelines_dagster.core.crawl.credentials import MAX_COOKIES, MAX_HEADERS, MAX_VALUE_LENGTH, Credentials
from pipelines_dagster.core.crawl.etiquette import MAX_USER_AGENT_LENGTH, RobotsMode, robots_of, user_agent_of
from pipelines_dagster.core.crawl.render.rule import RENDER_KEY, RenderMode, render_mode
from pipelines_dagster.core.crawl.site.config import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PAGES,
    MAX_DEPTH,
    MAX_PATTERNS,
    SITE_KEY,
    SiteConfig,
    crawl_mode,
)


class SiteIn(RequestBody):
    """A site crawl: start URLs, discovery from sitemaps and same-site links, and its bounds."""

    start_urls: list[str] = Field(min_length=1, max_length=MAX_URLS, description="Where discovery starts.")
    max_depth: int | None = Field(
        default=None, description=f"Links followed from a start URL, 0 to {MAX_DEPTH}; default {DEFAULT_MAX_DEPTH}."
    )
    max_pages: int | None = Field(
        default=None, description=f"Pages fetched at most, up to the deployment's cap; default {DEFAULT_MAX_PAGES}."
    )
    include: list[str] = Field(
        default_factory=list, max_length=MAX_PATTERNS, description="Only paths matching one of these globs (/docs/**)."
    )
    exclude: list[str] = Field(default_factory=list, max_length=MAX_PATTERNS, description="Never these paths.")
    subdomains: bool = Field(default=False, description="The start URLs' whole registrable domains.")
    drop_query_params: list[str] | Literal["all"] = Field(
        default_factory=list, description="Query parameters dropped from every discovered URL, or all of them."
    )


# A stored config is shown as it was accepted, whatever today's cap.
MAX_STORED_PAGES = 1_000_000


class SiteOut(BaseModel):
    start_urls: list[str]
    max_depth: int
    max_pages: int
    include: list[str]
    exclude: list[str]
    subdomains: bool
    drop_query_params: list[str] | Literal["all"]

    @classmethod
    def of(cls, site: SiteConfig) -> SiteOut:
        return cls.model_validate(site.to_config())


class BasicIn(RequestBody):
    username: str = Field(min_length=1, max_length=MAX_VALUE_LENGTH, description="Holds no colon.")
    password: SecretStr = Field(max_length=MAX_VALUE_LENGTH)


class AuthIn(RequestBody):
    """Credentials for a site behind a login: sent only to the connector's own hosts (its URLs', or its site's),
    stored sealed, never shown again. Given as a whole: what is left out is not kept."""

    basic: BasicIn | None = Field(default=None, description="HTTP basic auth.")
    bearer: SecretStr | None = Field(
        default=None, max_length=MAX_VALUE_LENGTH, description="A bearer token (Authorization: Bearer ...)."
    )
    headers: dict[str, SecretStr] = Field(
        default_factory=dict, max_length=MAX_HEADERS, description='Headers by name, e.g. {"X-Api-Key": "..."}.'
    )
    cookies: dict[str, SecretStr] = Field(
        default_factory=dict, max_length=MAX_COOKIES, description="Cookies by name, sent as a Cookie header."
    )

    def credentials(self) -> Credentials:
        """The credentials, checked; InvalidInputError names the field to fix, never a value."""
        basic = self.basic
        return Credentials(
            basic=(basic.username, basic.password.get_secret_value()) if basic is not None else None,
            bearer=self.bearer.get_secret_value() if self.bearer is not None else None,
            headers=[(name, value.get_secret_value()) for name, value in self.headers.items()],
            cookies=[(name, value.get_secret_value()) for name, value in self.cookies.items()],
        )


AUTH_IN = (
    "Credentials for a site behind a login, replaced as a whole; null clears them. Left out, they stay as they "
    "are, on PUT too: they are never shown, so a body written back from a read could not carry them."
)


class AuthOut(BaseModel):
    """Which credentials a connector has: kinds and names, never a value."""

    basic: bool
    bearer: bool
    headers: list[str] = Field(description="The names of its headers.")
    cookies: list[str] = Field(description="The names of its cookies.")


USER_AGENT_IN = "The User-Agent its crawls send and read robots.txt as; null or left out: the crawler's."
ROBOTS_IN = (
    "obey (the default) or ignore robots.txt: ignore is taken only when every host of the connector is one its "
    "workspace owns (an operator declares them), and applies to those hosts alone. Null or left out: obey."
)


RENDER_IN = (
    "Which pages a headless browser renders: never, auto (a page whose plain fetch extracts thin text for its "
    "HTML) or always. Null or left out: the crawl mode's default (never for a list, auto for a site), which "
    "follows the mode when it changes."
)


class ConnectorReplace(RequestBody):
    """A connector as a whole, but for what is fixed when it is made (its type, its own periodic indexing): a web
    connector crawls `urls` (mode list, the default) or discovers `site` (mode site)."""

    name: Name | None = Field(default=None, description="Default: the type's, e.g. `webcrawler connector`.")
    mode: str | None = Field(default=None, description="list or site; site when `site` is given.")
    urls: list[str] | None = Field(default=None, max_length=MAX_URLS, description="The URLs a list crawl fetches.")
    site: SiteIn | None = None
    render: RenderMode | None = Field(default=None, strict=False, description=RENDER_IN)
    auth: AuthIn | None = Field(default=None, description=AUTH_IN)
    user_agent: str | None = Field(default=None, max_length=MAX_USER_AGENT_LENGTH, description=USER_AGENT_IN)
    robots: RobotsMode | None = Field(default=None, strict=False, description=ROBOTS_IN)


class ConnectorCreate(ConnectorReplace):
    type: str = Field(description="The connector type, e.g. webcrawler.")
    index_every_minutes: EveryMinutes | None = Field(default=None, description="The connector's own periodic indexing.")


class ConnectorUpdate(ConnectorReplace):
    """Only the fields given change: `urls` make it a list crawl, `site` (replaced as a whole) a site crawl;
    `render` null gives back the crawl mode's default."""

    @field_validator("name", "mode", "urls", "site", mode="before")
    @classmethod
    def _refuse_null(cls, value: Any) -> Any:
        if value is None:
            raise PydanticCustomError("not_null", "must not be null; leave the field out to keep its value")
        return value


class ConnectorOut(BaseModel):
    id: int
    workspace_id: int
    type: str
    name: str
    mode: str = Field(description="list or site.")
    urls: list[str] | None = Field(description="A list crawl's URLs; null for a site crawl.")
    site: SiteOut | None = Field(description="A site crawl's bounds; null for a list crawl.")
    render: RenderMode = Field(description="Which pages its crawls render: the one chosen, else the crawl mode's.")
    render_chosen: bool = Field(
        description="Whether `render` was chosen; false: it is the crawl mode's default and follows the mode."
    )
    auth: AuthOut | None = Field(description="Which credentials it sends to its own hosts; null: none.")
    user_agent: str | None = Field(description="The User-Agent its crawls send; null: the crawler's.")
    robots: RobotsMode = Field(description="Whether its crawls obey robots.txt (ignore: on its owned hosts only).")
    periodic_indexing_enabled: bool
    created_at: datetime

    @classmethod
    def of(cls, connector: Connector) -> ConnectorOut:
        site = connector.config.get(SITE_KEY)
        return cls(
            id=connector.id,
            workspace_id=connector.workspace_id,
            type=connector.connector_type,
            name=connector.name,
            mode=crawl_mode(connector.config).value,
            urls=initial_urls(connector),
            site=SiteOut.of(SiteConfig.read(site, max_pages_cap=MAX_STORED_PAGES)) if site else None,
            render=render_mode(connector.config),
            render_chosen=connector.config.get(RENDER_KEY) is not None,
            auth=AuthOut.model_validate(shown) if (shown := shown_credentials(connector)) is not None else None,
            user_agent=user_agent_of(connector.config),
            robots=robots_of(connector.config),
            periodic_indexing_enabled=connector.periodic_indexing_enabled,
            created_at=connector.created_at,
        )


class ConnectorList(BaseModel):
    connectors: list[ConnectorOut]
