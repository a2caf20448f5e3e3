"""A run's plan: the guards, in the reference plan's order, and what they let through (what to crawl,
how, within which bounds, with which credentials, as which user agent and where robots.txt is waived). RunRefused
names the first guard that fails."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Connector, ConnectorType, Pipeline, PipelineTrigger, TriggerKind, Workspace
from pipelines_dagster.core.catalog.connector_credentials import open_credentials
from pipelines_dagster.core.catalog.connector_etiquette import robots_waived_on
from pipelines_dagster.core.catalog.connector_types import ineligible_reason, is_pipeline_eligible
from pipelines_dagster.core.catalog.connectors import credential_hosts, initial_urls, own_urls
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.crawl.credentials import HostCredentials
from pipelines_dagster.core.crawl.etiquette import user_agent_of
from pipelines_dagster.core.crawl.render.rule import RenderMode, render_mode
from pipelines_dagster.core.crawl.site.config import SITE_KEY, CrawlMode, SiteConfig, crawl_mode
from pipelines_dagster.core.errors import ConflictError, InvalidInputError
from pipelines_dagster.core.security.keyring import Keyring, SecretsKeyError


class RunRefused(ConflictError):
    """A guard stopped the run before any crawl or charge; the message says why."""


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    pipeline_id: int
    workspace_id: int
    connector_id: int
    save_to_kb: bool
    folder_id: int | None
    urls: tuple[str, ...]
    """The list to crawl; a site crawl's start URLs."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    site: SiteConfig | None = None
    """The bounds of a site crawl; None for a list crawl."""
    max_runtime_seconds: int | None = None
    """How long one run of the pipeline may take; None: the deployment's maximum runtime."""
    render: RenderMode = RenderMode.NEVER
    """Which pages the crawl reads as the browser renders them (the connector's setting, or its mode's default)."""
    credentials: HostCredentials | None = None
    """The connector's credentials, opened, with the hosts they go to; held in memory only, and shown by kind
    and name only (its repr)."""
    user_agent: str | None = None
    """The connector's own user agent; None: the crawler's."""
    robots_waived: frozenset[str] = frozenset()
    """Hosts the crawl fetches without robots.txt: the connector's, set to ignore it, that its workspace owns."""

    @property
    def most_pages(self) -> int:
        """The most pages the crawl can fetch: what the credit check asks for before it starts."""
        return self.site.max_pages if self.site is not None else len(self.urls)

    def scope(self) -> str:
        """What the crawl covers, for its start line: "37 URLs of its list", or a site crawl's bounds."""
        urls = f"{len(self.urls)} {'URL' if len(self.urls) == 1 else 'URLs'}"
        if self.site is None:
            return f"{urls} of its list"
        return f"a site from {urls}, up to {self.site.max_pages} pages, {self.site.max_depth} links deep"


def plan_run(session: Session, pipeline_id: int, *, keyring: Keyring | None) -> RunPlan:
    """The guards, in the reference plan's order; RunRefused names the first that fails.

    The connector's credentials are opened with `keyring`, in the process that crawls; None plans for the
    guards alone (a launch checking that the run may start), without opening them."""
    pipeline = session.get(Pipeline, pipeline_id)
    if pipeline is None:
        raise RunRefused(f"pipeline {pipeline_id} does not exist")
    if not pipeline.enabled:
        raise RunRefused(f"pipeline {pipeline_id} is disabled; enable it before running it")
    if pipeline.connector_id is None:
        raise RunRefused("uploads pipeline has no fetch executor")
    connector = session.get(Connector, pipeline.connector_id)
    assert connector is not None  # the foreign key cascades deletes
    # Re-checked here: the type may have become ineligible since the pipeline was created.
    if not is_pipeline_eligible(connector.connector_type):
        raise RunRefused(f"{ineligible_reason(connector.connector_type)} any more; the run is not started")
    if connector.connector_type != ConnectorType.WEBCRAWLER.value:
        raise RunRefused(f"executor not implemented for {connector.connector_type}")
    site = _site_config(connector)
    try:
        render = render_mode(connector.config)
    except InvalidInputError as exc:
        raise RunRefused(f"connector {connector.id} has an invalid render setting: {exc}") from None
    urls = list(site.start_urls) if site is not None else initial_urls(pipeline) or initial_urls(connector) or []
    if not urls:
        raise RunRefused("no URLs to crawl")
    credentials = _credentials(connector, keyring) if keyring is not None else None
    try:
        waived = robots_waived_on(connector, session.get_one(Workspace, pipeline.workspace_id), own_urls(connector))
    except InvalidInputError as exc:
        raise RunRefused(f"connector {connector.id} has an invalid robots setting: {exc}") from None
    return RunPlan(
        pipeline_id=pipeline.id,
        workspace_id=pipeline.workspace_id,
        connector_id=connector.id,
        save_to_kb=pipeline.save_to_kb,
        folder_id=pipeline.destination_folder_id,
        urls=tuple(dict.fromkeys(urls)),
        retry=RetryPolicy.of(pipeline),
        site=site,
        max_runtime_seconds=pipeline.max_runtime_seconds,
        render=render,
        credentials=credentials,
        user_agent=user_agent_of(connector.config),
        robots_waived=waived,
    )


def plan_manual_run(session: Session, pipeline_id: int) -> RunPlan:
    """The guards of a run started by hand (run-now from the API, the CLI): the run's own, then the
    pipeline's manual trigger, which must be there and on; RunRefused says how to switch it on.

    A launch from the Dagster UI is an operator's and does not pass here: its crawl step checks only
    `plan_run`, so the UI can run any partition whatever its manual trigger says.
    """
    plan = plan_run(session, pipeline_id, keyring=None)
    manual = session.scalar(
        sa.select(PipelineTrigger).where(
            PipelineTrigger.pipeline_id == pipeline_id, PipelineTrigger.kind == TriggerKind.MANUAL.value
        )
    )
    where = f"--workspace {plan.workspace_id} --pipeline {pipeline_id}"
    if manual is None:
        raise RunRefused(
            f"pipeline {pipeline_id} has no manual trigger, so it cannot be run by hand; add one with "
            f"`pipelines-dagster trigger create {where} --kind manual` (API: POST .../triggers "
            '{"kind": "manual"})'
        )
    if not manual.enabled:
        raise RunRefused(
            f"pipeline {pipeline_id} has no enabled manual trigger (trigger {manual.id} is off), so it cannot be "
            f"run by hand; enable it with `pipelines-dagster trigger enable {where} --trigger {manual.id}` "
            f"(API: POST .../triggers/{manual.id}/enable)"
        )
    return plan


def _site_config(connector: Connector) -> SiteConfig | None:
    """The connector's site-crawl bounds, re-validated (a row may come from an older release or a
    hand edit); None in list mode. RunRefused says what to fix."""
    try:
        if crawl_mode(connector.config) is not CrawlMode.SITE:
            return None
        return SiteConfig.read(connector.config.get(SITE_KEY) or {})
    except InvalidInputError as exc:
        raise RunRefused(f"connector {connector.id} has an invalid site-crawl config: {exc}") from None


def _credentials(connector: Connector, keyring: Keyring) -> HostCredentials | None:
    """The connector's credentials, opened, with its hosts; RunRefused, before any request, when no key opens
    them: a crawl without them would only store the login page in place of every page."""
    try:
        credentials = open_credentials(connector, keyring)
    except SecretsKeyError as exc:
        raise RunRefused(f"{exc}; the run is not started") from None
    except InvalidInputError as exc:  # stored by a release that checked less
        raise RunRefused(f"connector {connector.id} has invalid credentials ({exc}): set them again") from None
    return HostCredentials(credentials, credential_hosts(connector)) if credentials is not None else None
