"""Connectors: where a pipeline's content comes from, and the de-dup guard that keeps one scheduler per connector."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Connector, ConnectorType, Pipeline, PipelineTrigger, Workspace
from pipelines_dagster.core.catalog.changes import KEEP, Keep
from pipelines_dagster.core.catalog.connector_credentials import set_credentials
from pipelines_dagster.core.catalog.connector_etiquette import OwnUrls, set_etiquette
from pipelines_dagster.core.catalog.schedules import ScheduleSpec, _schedule_triggers, set_schedule, validate_interval
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.crawl.credentials import CredentialHosts, Credentials
from pipelines_dagster.core.crawl.render.rule import RENDER_KEY, RenderMode, validate_render
from pipelines_dagster.core.crawl.site.config import CRAWL_MODE_KEY, SITE_KEY, CrawlMode, SiteConfig, crawl_mode
from pipelines_dagster.core.errors import ConflictError, InvalidInputError, NotFoundError
from pipelines_dagster.core.security.keyring import Keyring
from pipelines_dagster.core.validation import validate_choice, validate_name, validate_urls

URLS_KEY = "INITIAL_URLS"


def initial_urls(row: Connector | Pipeline) -> list[str] | None:
    """The URLs a connector crawls, or a pipeline's own that replace its connector's."""
    return row.config.get(URLS_KEY)


def set_initial_urls(row: Connector | Pipeline, urls: list[str] | None) -> None:
    # A new dict, so the JSON column is seen as changed.
    config = {key: value for key, value in row.config.items() if key != URLS_KEY}
    row.config = config if urls is None else {**config, URLS_KEY: urls}


def create_connector(
    session: Session,
    *,
    workspace_id: int,
    connector_type: str,
    urls: list[str] | None = None,
    name: str | None = None,
    index_every_minutes: int | None = None,
    site: SiteConfig | None = None,
    render: str | None = None,
    credentials: Credentials | None = None,
    keyring: Keyring | None = None,
    user_agent: str | None = None,
    robots: str | None = None,
    now: datetime | None = None,
) -> Connector:
    """Create a connector; with `index_every_minutes`, also its own periodic indexing pipeline.

    A web connector crawls its `urls` (list mode) or, given a validated `site`, discovers a site; `render` is
    its render setting when chosen (None: its crawl mode's default); `credentials` are sent to its own hosts,
    sealed under `keyring`; `user_agent` replaces the crawler's, and `robots` ignore waives robots.txt, which
    only hosts the workspace owns may."""
    workspace = get_workspace(session, workspace_id)
    if index_every_minutes is not None:
        validate_interval(index_every_minutes, field="index_every_minutes")
    kind = validate_choice(ConnectorType, connector_type, field="type", what="connector type")
    if kind is not ConnectorType.WEBCRAWLER and (urls or site):
        raise InvalidInputError("site" if site else "url", f"a {kind.value} connector takes no URLs")
    chosen = _render_of(kind, render)
    _check_credentials(kind, credentials, keyring)
    _check_web_only(kind, user_agent=user_agent, robots=robots)
    if site is not None and urls:
        raise InvalidInputError("site", "give the URLs to crawl (url) or a site to discover (site), not both")
    connector = Connector(
        workspace_id=workspace_id,
        connector_type=kind.value,
        name=validate_name(name) if name else _default_name(kind),
        config={},
        periodic_indexing_enabled=index_every_minutes is not None,
        indexing_frequency_minutes=index_every_minutes,
    )
    if kind is ConnectorType.WEBCRAWLER:
        _set_crawl(connector, urls=None if site else validate_urls(urls or [], field="url"), site=site)
        _set_render(connector, chosen)
        set_etiquette(connector, workspace, own_urls(connector), user_agent=user_agent, robots=robots)
        if credentials is not None and keyring is not None:
            set_credentials(connector, credentials, keyring)
    session.add(connector)
    session.flush()
    if index_every_minutes is not None:
        _create_default_pipeline(session, workspace, connector, now=now or datetime.now(UTC))
    return connector


def _default_name(kind: ConnectorType) -> str:
    return f"{kind.value} connector"


def _create_default_pipeline(
    session: Session, workspace: Workspace, connector: Connector, *, now: datetime
) -> Pipeline:
    """The connector's own periodic indexing, as a system-managed pipeline into the KB root."""
    assert connector.indexing_frequency_minutes is not None
    pipeline = Pipeline(
        workspace_id=workspace.id,
        connector_id=connector.id,
        name=f"{connector.name} #{connector.id} (periodic indexing)",
        save_to_kb=True,
        enabled=True,
        created_by=workspace.owner_user_id,
        system_managed=True,
    )
    session.add(pipeline)
    session.flush()
    session.add(PipelineTrigger.manual_of(pipeline))
    trigger = set_schedule(session, pipeline, ScheduleSpec(every_minutes=connector.indexing_frequency_minutes), now=now)
    assert trigger is not None
    connector.next_scheduled_at = trigger.next_fire_at
    session.flush()
    return pipeline


DEDUP_REASON = "a user pipeline over this connector owns its indexing"


def reconcile_connector_indexing(session: Session, connector_id: int, *, now: datetime | None = None) -> None:
    """The de-dup guard: one scheduler per connector.

    While any enabled user pipeline wraps the connector, the connector's own
    periodic indexing (its system-managed pipeline's schedule) is off; when the
    last one is disabled or deleted, that schedule comes back. A schedule that
    was switched off for another reason is left alone.

    The guard counts, then writes, under the connector's row lock (PostgreSQL; on SQLite every
    transaction holds the writer lock from its start), so guards of one connector take turns and
    each counts what the one before it committed: two pipelines disabled at once cannot each still
    see the other enabled and leave the connector indexed by neither.
    """
    connector = session.get(Connector, connector_id, with_for_update=True, populate_existing=True)
    if connector is None:
        return
    trigger = session.scalar(
        _schedule_triggers()
        .join(Pipeline, PipelineTrigger.pipeline_id == Pipeline.id)
        .where(Pipeline.connector_id == connector_id, Pipeline.system_managed.is_(True))
        # Read after the lock: this session may hold the row from before another guard's commit.
        .execution_options(populate_existing=True)
    )
    if trigger is None:
        return
    owned = session.scalar(
        sa.select(sa.func.count())
        .select_from(Pipeline)
        .where(
            Pipeline.connector_id == connector_id,
            Pipeline.system_managed.is_(False),
            Pipeline.enabled.is_(True),
        )
    )
    if owned and trigger.enabled:
        trigger.enabled = False
        trigger.disabled_reason = DEDUP_REASON
        trigger.next_fire_at = None
        connector.periodic_indexing_enabled = False
        connector.next_scheduled_at = None
    elif not owned and not trigger.enabled and trigger.disabled_reason == DEDUP_REASON:
        trigger.enabled = True
        trigger.disabled_reason = None
        trigger.next_fire_at = ScheduleSpec.of(trigger).next_fire_after(now or datetime.now(UTC))
        connector.periodic_indexing_enabled = True
        connector.next_scheduled_at = trigger.next_fire_at
    session.flush()


def get_connector(session: Session, *, workspace_id: int, connector_id: int) -> Connector:
    connector = session.get(Connector, connector_id)
    if connector is None or connector.workspace_id != workspace_id:
        raise NotFoundError(f"connector {connector_id} is not in workspace {workspace_id}")
    return connector


def list_connectors(session: Session, *, workspace_id: int) -> list[Connector]:
    """The workspace's connectors by id."""
    query = sa.select(Connector).where(Connector.workspace_id == workspace_id).order_by(Connector.id)
    return list(session.scalars(query))


def _set_crawl(connector: Connector, *, urls: list[str] | None, site: SiteConfig | None) -> None:
    """What a web connector crawls: a list of validated URLs, or a site; the other is dropped."""
    config = {key: value for key, value in connector.config.items() if key not in {URLS_KEY, CRAWL_MODE_KEY, SITE_KEY}}
    if site is not None:
        config |= {CRAWL_MODE_KEY: CrawlMode.SITE.value, SITE_KEY: site.to_config()}
    connector.config = config if urls is None else {**config, URLS_KEY: urls}


def _render_of(kind: ConnectorType, render: str | None) -> RenderMode | None:
    """The render setting a connector of `kind` is given, validated; None leaves it to the crawl mode."""
    if render is None:
        return None
    if kind is not ConnectorType.WEBCRAWLER:
        raise InvalidInputError("render", f"a {kind.value} connector fetches no web pages, so it takes no render")
    return validate_render(render)


def _set_render(connector: Connector, render: RenderMode | None) -> None:
    """Stored only when chosen: a connector without one follows its crawl mode's default, across mode changes."""
    config = {key: value for key, value in connector.config.items() if key != RENDER_KEY}
    connector.config = config if render is None else {**config, RENDER_KEY: render.value}


@dataclass(frozen=True, kw_only=True)
class ConnectorChanges:
    """What `update_connector` changes: the fields given (None keeps a name, URLs or site). URLs make a web
    connector a list crawl, a site makes it a site crawl; its type and its own periodic indexing stay as they
    were made."""

    name: str | None = None
    urls: list[str] | None = None
    site: SiteConfig | None = None
    render: str | Keep | None = KEEP
    """never, auto or always; None: its crawl mode's default again, which then follows each change of mode."""
    credentials: Credentials | Keep | None = KEEP
    """Replace its credentials as a whole; None: clear them. Left out they stay, on a replace too: they cannot
    be read back, so a client that writes back what it read would otherwise lose them."""
    user_agent: str | Keep | None = KEEP
    """None: the crawler's user agent again."""
    robots: str | Keep | None = KEEP
    """obey or ignore; None: obey again."""


def update_connector(
    session: Session,
    *,
    workspace_id: int,
    connector_id: int,
    changes: ConnectorChanges,
    replace: bool = False,
    keyring: Keyring | None = None,
) -> Connector:
    """Change what `changes` gives, or with `replace` set the connector to it as a whole (a name left out is
    the default one, a render left out the crawl mode's, a web connector needs URLs or a site); every check
    passes before anything is written. Pipelines over the connector crawl what it says from their next run on
    (a pipeline's own URLs still replace its connector's). New credentials are sealed under `keyring`.

    A change that would send the credentials it keeps to a host they did not go to is refused: whoever may
    change a connector may not read its credentials, so must not be able to send them elsewhere either."""
    connector = get_connector(session, workspace_id=workspace_id, connector_id=connector_id)
    kind = ConnectorType(connector.connector_type)
    urls, site = changes.urls, changes.site
    if urls is not None and site is not None:
        raise InvalidInputError("site", "give the URLs to crawl (urls) or a site to discover (site), not both")
    if replace and kind is ConnectorType.WEBCRAWLER and site is None:
        urls = urls or []
    if kind is not ConnectorType.WEBCRAWLER and (urls is not None or site is not None):
        raise InvalidInputError("site" if site else "urls", f"a {kind.value} connector takes no URLs")
    name = changes.name if changes.name is not None else _default_name(kind) if replace else connector.name
    name = validate_name(name)
    urls = None if urls is None else validate_urls(urls, field="urls")
    render = None if isinstance(changes.render, Keep) else _render_of(kind, changes.render)
    credentials = changes.credentials
    if not isinstance(credentials, Keep):
        _check_credentials(kind, credentials, keyring)
    user_agent = None if replace and changes.user_agent is KEEP else changes.user_agent
    robots = None if replace and changes.robots is KEEP else changes.robots
    _check_web_only(kind, user_agent=user_agent, robots=robots)
    sent_to = credential_hosts(connector).names()
    connector.name = name
    if urls is not None or site is not None:
        _set_crawl(connector, urls=urls, site=site)
    if replace or changes.render is not KEEP:
        _set_render(connector, render)
    if kind is ConnectorType.WEBCRAWLER:
        workspace = get_workspace(session, workspace_id)
        own = own_urls(connector)
        set_etiquette(
            connector,
            workspace,
            own,
            user_agent=user_agent,
            robots=robots,
            urls_changed="site" if site is not None else "urls" if urls is not None else None,
        )
    if isinstance(credentials, Keep):
        _refuse_new_hosts(connector, sent_to, field="site" if site is not None else "urls")
    elif keyring is not None:
        set_credentials(connector, credentials, keyring)
    session.flush()
    return connector


def own_urls(connector: Connector) -> OwnUrls:
    """The URLs the connector itself names: its list's (not a pipeline's own, which may name other hosts), or
    its site's start URLs, with whether the site takes their subdomains."""
    if crawl_mode(connector.config) is CrawlMode.SITE:
        site = connector.config.get(SITE_KEY) or {}
        return OwnUrls(site.get("start_urls") or [], subdomains=bool(site.get("subdomains")))
    return OwnUrls(initial_urls(connector) or [])


def credential_hosts(connector: Connector) -> CredentialHosts:
    """The hosts the connector's credentials go to: those of its own URLs (with their registrable domains when
    its site takes subdomains)."""
    own = own_urls(connector)
    return CredentialHosts(own.urls, subdomains=own.subdomains)


def _check_web_only(kind: ConnectorType, **given: str | Keep | None) -> None:
    for field, value in given.items():
        if kind is not ConnectorType.WEBCRAWLER and isinstance(value, str):
            raise InvalidInputError(field, f"a {kind.value} connector fetches no web pages, so it takes no {field}")


def _check_credentials(kind: ConnectorType, credentials: Credentials | None, keyring: Keyring | None) -> None:
    if credentials is None:
        return
    if kind is not ConnectorType.WEBCRAWLER:
        raise InvalidInputError("auth", f"a {kind.value} connector fetches no web pages, so it takes no credentials")
    if keyring is None:
        raise TypeError("credentials are stored sealed: give the keyring that seals them")


def _refuse_new_hosts(connector: Connector, before: frozenset[str], *, field: str) -> None:
    """Refuse a change that sends the connector's credentials somewhere they did not go."""
    if connector.credentials is None:
        return
    added = credential_hosts(connector).names() - before
    if added:
        raise InvalidInputError(
            field,
            f"the connector's credentials go only to its own hosts, and this change adds {', '.join(sorted(added))}: "
            "give the credentials again with it to send them there too, or clear them",
        )


class ConnectorInUseError(ConflictError):
    """A user's pipelines still crawl the connector."""


def delete_connector(session: Session, *, workspace_id: int, connector_id: int) -> list[int]:
    """Delete a connector with its own periodic indexing; refused while any other pipeline crawls it, since
    deleting it would delete them too. The ids of the connector's own indexing pipelines, deleted with it."""
    get_connector(session, workspace_id=workspace_id, connector_id=connector_id)
    # Under the connector's row lock (SQLite: the writer lock), so a pipeline made over it meanwhile either
    # is counted here or waits and then finds no connector: none is deleted with it unseen.
    connector = session.get(Connector, connector_id, with_for_update=True, populate_existing=True)
    assert connector is not None
    rows = session.execute(
        sa.select(Pipeline.id, Pipeline.name, Pipeline.system_managed)
        .where(Pipeline.connector_id == connector_id)
        .order_by(Pipeline.id)
    ).all()
    if users := [f"{row.id} ({row.name})" for row in rows if not row.system_managed]:
        them = "them" if len(users) > 1 else "it"
        raise ConnectorInUseError(
            f"connector {connector_id} is crawled by pipeline{'s' if len(users) > 1 else ''} {', '.join(users)}; "
            f"delete {them} or give {them} another connector first"
        )
    session.delete(connector)
    session.flush()
    return [row.id for row in rows]
