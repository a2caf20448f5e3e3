"""Connectors: where a pipeline's content comes from, and the de-dup guard that keeps one scheduler per connector."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Connector, ConnectorType, Pipeline, PipelineTrigger, Workspace
from pipelines_dagster.core.catalog.schedules import ScheduleSpec, _schedule_triggers, set_schedule, validate_interval
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.crawl.site.config import CRAWL_MODE_KEY, SITE_KEY, CrawlMode, SiteConfig
from pipelines_dagster.core.errors import InvalidInputError, NotFoundError
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
    now: datetime | None = None,
) -> Connector:
    """Create a connector; with `index_every_minutes`, also its own periodic indexing pipeline.

    A web connector crawls its `urls` (list mode) or, given a validated `site`, discovers a site."""
    workspace = get_workspace(session, workspace_id)
    if index_every_minutes is not None:
        validate_interval(index_every_minutes, field="index_every_minutes")
    kind = validate_choice(ConnectorType, connector_type, field="type", what="connector type")
    if kind is not ConnectorType.WEBCRAWLER and (urls or site):
        raise InvalidInputError("site" if site else "url", f"a {kind.value} connector takes no URLs")
    if site is not None and urls:
        raise InvalidInputError("site", "give the URLs to crawl (url) or a site to discover (site), not both")
    connector = Connector(
        workspace_id=workspace_id,
        connector_type=kind.value,
        name=validate_name(name) if name else f"{kind.value} connector",
        config={},
        periodic_indexing_enabled=index_every_minutes is not None,
        indexing_frequency_minutes=index_every_minutes,
    )
    if kind is ConnectorType.WEBCRAWLER and site is not None:
        connector.config = {CRAWL_MODE_KEY: CrawlMode.SITE.value, SITE_KEY: site.to_config()}
    elif kind is ConnectorType.WEBCRAWLER:
        set_initial_urls(connector, validate_urls(urls or [], field="url"))
    session.add(connector)
    session.flush()
    if index_every_minutes is not None:
        _create_default_pipeline(session, workspace, connector, now=now or datetime.now(UTC))
    return connector


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
