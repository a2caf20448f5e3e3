"""A whole stack for asset tests: real app DB, Dagster instance, blob store, locks and a loopback site."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import CreditLedgerEntry, Document, Pipeline, TokenUsage, Workspace
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.core.catalog.connectors import ConnectorChanges, create_connector, update_connector
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.security.keyring import Keyring
from pipelines_dagster.core.storage.blob import BlobStore
from pipelines_dagster.partitions import add_pipeline_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import LocalBlobStoreResource, S3BlobStoreResource
from pipelines_dagster.resources.crawler import CrawlerResource
from pipelines_dagster.resources.locks import DatabaseLocksResource, LocksResource, RedisLocksResource
from pipelines_dagster.resources.network import NetworkAccess
from pipelines_dagster.resources.notifications import NotificationsResource
from pipelines_dagster.runs import run_tags
from tests.support.web import WebServer, page

# Where the stack's notifications say the HTTP API is (their links are built on it, never followed).
API_URL = "https://pipelines.example.com"


@dataclass
class Stack:
    engine: sa.Engine
    instance: dg.DagsterInstance
    web: WebServer
    blob_store: dg.ConfigurableResource
    locks: LocksResource
    billing_enabled: bool = False
    micros_per_crawl: int = 1000
    secrets_from_env: bool = False
    """The app database resource opens connector credentials with PIPELINES_SECRETS_KEY, as a deployment's does."""
    crawler: CrawlerResource = field(
        default_factory=lambda: CrawlerResource(
            network=NetworkAccess(allowed_networks=["127.0.0.1/32"]), max_attempts=2, total_timeout=5, connect_timeout=2
        )
    )

    @property
    def sessions(self) -> sessionmaker[Session]:
        return session_factory(self.engine)

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=False)

    @property
    def blob(self) -> BlobStore:
        return self.blob_store.store()

    def resources(self) -> dict[str, Any]:
        app_db = AppDatabaseResource(
            url=self.url, secrets_key=dg.EnvVar("PIPELINES_SECRETS_KEY") if self.secrets_from_env else None
        )
        return {
            "app_db": app_db,
            "blob_store": self.blob_store,
            "locks": self.locks,
            "crawler": self.crawler,
            "billing": BillingResource(
                app_db=app_db, billing_enabled=self.billing_enabled, micros_per_crawl=self.micros_per_crawl
            ),
            "notifications": NotificationsResource(
                app_db=app_db, api_url=API_URL, network=NetworkAccess(allowed_networks=["127.0.0.1/32"])
            ),
        }

    def portable_resources(self) -> dict[str, tuple[type, dict[str, Any]]]:
        """`resources()` as (class, fields) pairs, which pickle: for runs in processes of their own."""

        def portable(value: Any) -> Any:
            if not isinstance(value, dg.ConfigurableResource):
                return value
            return type(value), {field: portable(getattr(value, field)) for field in type(value).model_fields}

        return {name: portable(resource) for name, resource in self.resources().items()}

    def key(self, pipeline_id: int) -> str:
        """The pipeline's partition key, as the catalog stores it."""
        with self.sessions() as session:
            return session.get_one(Pipeline, pipeline_id).partition

    def keep_partition(self, pipeline_id: int) -> None:
        """Give a disabled pipeline the partition it had while enabled, as when a run was launched on it just
        before it was disabled (or by hand on an older instance): the run meets the disabled pipeline."""
        add_pipeline_partitions(self.instance, [self.key(pipeline_id)])

    def site(self, pages: int, *, prefix: str = "/p") -> list[str]:
        for n in range(pages):
            self.web.route(f"{prefix}{n}", page(f"Page {n}", f"Paragraph about topic {n}.\n\nMore on {n}."))
        return [self.web.url(f"{prefix}{n}") for n in range(pages)]

    def pipeline(
        self,
        urls: list[str],
        *,
        save_to_kb: bool = True,
        folder: str | None = "Docs",
        enabled: bool = True,
        credit: int | None = None,
        site: SiteConfig | None = None,
        render: str | None = None,
    ) -> tuple[int, int]:
        """A new workspace with a webcrawler connector (over `urls`, or discovering `site`, rendering pages
        as `render` says) and a pipeline over it: (workspace id, pipeline id)."""
        with transaction(self.sessions) as session:
            workspace = create_workspace(session, name="acme", owner_user_id=f"u-{uuid.uuid4().hex[:6]}").workspace
            connector = create_connector(
                session, workspace_id=workspace.id, connector_type="webcrawler", urls=urls, site=site, render=render
            )
            pipeline = services.create_pipeline(
                session,
                self.instance,
                workspace_id=workspace.id,
                connector_id=connector.id,
                name="p",
                save_to_kb=save_to_kb,
                folder_name=folder,
                enabled=enabled,
            )
            ids = workspace.id, pipeline.id
        if not enabled:
            self.keep_partition(pipeline.id)
        if credit:
            from pipelines_dagster.core.ledger.billing import Billing

            Billing(self.sessions, enabled=True, micros_per_crawl=self.micros_per_crawl).grant(ids[0], credit)
        return ids

    def run(
        self, pipeline_id: int, workspace_id: int, *, assets: list | None = None, trigger: str = "manual"
    ) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            assets or [crawl_results, kb_documents],
            partition_key=self.key(pipeline_id),
            instance=self.instance,
            resources=self.resources(),
            tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=trigger),
            raise_on_error=False,
        )

    def change_connector(self, pipeline_id: int, changes: ConnectorChanges, *, keyring: Keyring | None = None) -> None:
        """Change the connector a pipeline crawls, as the API does (new credentials sealed under `keyring`)."""
        with transaction(self.sessions) as session:
            pipeline = session.get_one(Pipeline, pipeline_id)
            assert pipeline.connector_id is not None
            update_connector(
                session,
                workspace_id=pipeline.workspace_id,
                connector_id=pipeline.connector_id,
                changes=changes,
                keyring=keyring,
            )

    def documents(self, workspace_id: int) -> list[Document]:
        with self.sessions() as session:
            return list(
                session.scalars(sa.select(Document).where(Document.workspace_id == workspace_id).order_by(Document.url))
            )

    def charges(self, workspace_id: int) -> tuple[int, int]:
        """(charge ledger rows, web_crawl usage rows) of a workspace."""
        from pipelines_dagster.app_db.models import CreditAccount

        with self.sessions() as session:
            ledger = session.scalar(
                sa.select(sa.func.count())
                .select_from(CreditLedgerEntry)
                .join(CreditAccount)
                .where(CreditAccount.workspace_id == workspace_id, CreditLedgerEntry.kind == "charge")
            )
            usage = session.scalar(
                sa.select(sa.func.count())
                .select_from(TokenUsage)
                .where(TokenUsage.workspace_id == workspace_id, TokenUsage.usage_type == "web_crawl")
            )
            return ledger, usage


@contextmanager
def subscriptions(stack: Stack, events: list[str]) -> Iterator[Callable[[int], None]]:
    """Subscribe workspaces to `events` on the stack's /hook; each is deleted afterwards, with its deliveries, since
    a sender sends whatever is due in the database and the PostgreSQL one outlives the test."""
    from tests.notifications.conftest import endpoint

    subscribed: list[int] = []

    def to(workspace_id: int) -> None:
        endpoint(stack.sessions, workspace_id, stack.web.url("/hook"), events=events)
        subscribed.append(workspace_id)

    yield to
    with transaction(stack.sessions) as session:
        session.execute(sa.delete(Workspace).where(Workspace.id.in_(subscribed)))


def rebuilt_resources(portable: dict[str, tuple[type, dict[str, Any]]]) -> dict[str, Any]:
    """The resources `Stack.portable_resources` describes, rebuilt (nested ones included) in this process."""

    def rebuilt(value: Any) -> Any:
        return rebuilt_resources({"": value})[""] if isinstance(value, tuple) else value

    return {
        name: cls(**{field: rebuilt(value) for field, value in fields.items()})
        for name, (cls, fields) in portable.items()
    }


def materialization(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    """The metadata of the asset's one materialization in the run, whichever step logged it."""
    events = [event for event in result.get_asset_materialization_events() if event.asset_key == dg.AssetKey(asset)]
    assert len(events) == 1, f"{asset} materialized {len(events)} times"
    return {key: value.value for key, value in events[0].materialization.metadata.items()}


def fail_once_after_the_charge(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Make the crawl fail once, right after it charged; the list says whether each attempt charged anew."""
    import pipelines_dagster.assets.crawl_results as module

    real, calls = module._failed_urls_table, []

    def flaky(report):
        calls.append(report.newly_charged)
        if len(calls) == 1:
            raise ConnectionError("metadata store blip after the charge")
        return real(report)

    monkeypatch.setattr(module, "_failed_urls_table", flaky)
    return calls


def code_location_job(stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path, *, billing: bool = True):
    """`pipeline_run` as Dagster loads it from the code location, over the stack's database and blob
    directory (set in the environment the location reads), for `dg.execute_job` and its re-executions."""
    from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository

    for name, value in {
        "PIPELINES_DATA_DIR": str(tmp_path / "data"),
        "PIPELINES_DATABASE_URL": stack.url,
        "PIPELINES_BLOB_STORE": str(stack.blob_store.root),
        "PIPELINES_BILLING_ENABLED": str(billing).lower(),
        "PIPELINES_CRAWLER_ALLOWED_NETWORKS": "127.0.0.1/32",
    }.items():
        monkeypatch.setenv(name, value)
    # The code location reads its settings when imported: a copy another test imported in this
    # process would carry that test's database. Imported afresh here, and the old one put back after.
    monkeypatch.delitem(sys.modules, "pipelines_dagster.definitions", raising=False)
    # Dagster keeps the last job it loaded from a reconstructable job of the same module and name, per process
    # (lru_cache on the class): another test's, with that test's settings (billing off, say), until cleared.
    ReconstructableJob.get_definition.cache_clear()
    ReconstructableJob.get_repository_definition.cache_clear()
    return ReconstructableJob(
        ReconstructableRepository.for_module("pipelines_dagster.definitions", "defs"), "pipeline_run"
    )


def set_pipeline(stack: Stack, pipeline_id: int, **values) -> None:
    """Set columns of a pipeline row directly, as a later edit or a deploy would leave it."""
    with transaction(stack.sessions) as session:
        pipeline = session.get(Pipeline, pipeline_id)
        for name, value in values.items():
            setattr(pipeline, name, value)


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    failures = [event for event in result.all_events if event.is_step_failure]
    assert failures, "the run did not fail"
    return failures[0].step_failure_data.error.message


@pytest.fixture
def web():
    with WebServer() as server:
        yield server


@pytest.fixture
def embedded(sqlite_engine, tmp_path, web) -> Stack:
    with dg.instance_for_test() as instance:
        yield Stack(
            engine=sqlite_engine,
            instance=instance,
            web=web,
            blob_store=LocalBlobStoreResource(root=str(tmp_path / "blobs")),
            locks=DatabaseLocksResource(database_url=sqlite_engine.url.render_as_string(hide_password=False)),
        )


@pytest.fixture
def production(postgres_engine, s3_endpoint_url, s3_bucket, redis_url, web) -> Stack:
    with dg.instance_for_test() as instance:
        yield Stack(
            engine=postgres_engine,
            instance=instance,
            web=web,
            blob_store=S3BlobStoreResource(bucket=s3_bucket, prefix="runs", endpoint_url=s3_endpoint_url),
            locks=RedisLocksResource(url=redis_url, key_prefix=f"test:{uuid.uuid4().hex[:8]}:"),
        )


@pytest.fixture(params=["embedded", "production"])
def stack(request) -> Stack:
    return request.getfixturevalue(request.param)
