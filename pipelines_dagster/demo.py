"""The demo: the example docs site served on loopback, a workspace with a KB pipeline over it.

`pipelines-dagster demo --once` crawls it headless and prints a summary;
`pipelines-dagster demo` keeps the site up and starts `dagster dev`, so the
partition can be materialized from the UI.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, Document, Pipeline, Workspace
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.core.catalog.connectors import set_initial_urls
from pipelines_dagster.crawl_metadata import CrawlMetadata
from pipelines_dagster.resources.deployment import build_resources
from pipelines_dagster.runs import CRAWL_RESULTS_ASSET, KB_DOCUMENTS_ASSET, Trigger, run_tags
from pipelines_dagster.settings import DEFAULT_SITE_PORT, Settings, load_settings

SITE_DIR = Path(__file__).resolve().parents[1] / "examples" / "site"
DEMO_WORKSPACE = "Northwind demo"
DEMO_OWNER = "demo-user"
DEMO_PIPELINE = "Northwind docs"
LOOPBACK = "127.0.0.1/32"
# Not in urls.txt: robots.txt disallows it, so the demo shows a refused URL next to the rest.
DRAFT_PAGE = "drafts/offline-sync-v2.html"


class DemoSiteMissingError(FileNotFoundError):
    pass


def site_paths(site_dir: Path = SITE_DIR) -> list[str]:
    listing = site_dir / "urls.txt"
    if not listing.is_file():
        raise DemoSiteMissingError(
            f"the demo site is missing ({listing} not found); run the demo from a checkout of the repo"
        )
    paths = [line.strip() for line in listing.read_text().splitlines() if line.strip()]
    return [*paths, DRAFT_PAGE]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """The demo's crawl is reported in its summary, not as an access log."""


class SitePortBusyError(OSError):
    pass


def site_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


@contextmanager
def serve_site(*, port: int, site_dir: Path = SITE_DIR) -> Iterator[str]:
    """Serve the site on 127.0.0.1 in a background thread; yields its base URL.

    A fixed port keeps the demo's URLs, and so its documents, the same from run to run.
    """
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise SitePortBusyError(
            f"cannot serve the demo site on 127.0.0.1:{port} ({exc.strerror}); pass another --site-port "
            "(or SITE_PORT=... to make run)"
        ) from None
    thread = threading.Thread(target=server.serve_forever, name="demo-site", daemon=True)
    thread.start()
    try:
        yield site_url(port)
    finally:
        server.shutdown()
        server.server_close()


def demo_pipeline_name(site_port: int) -> str:
    """The demo pipeline over the site on `site_port`: a demo on another port has its own pipeline, connector and
    folder, so it neither re-points the one a live demo crawls nor adds its pages to that one's documents."""
    return DEMO_PIPELINE if site_port == DEFAULT_SITE_PORT else f"{DEMO_PIPELINE} (port {site_port})"


@dataclass(frozen=True)
class DemoPipeline:
    workspace_id: int
    pipeline_id: int
    partition_key: str
    api_token: str | None
    """Set only when this call created the workspace."""


def seed(sessions: sessionmaker[Session], instance: dg.DagsterInstance, *, site_port: int) -> DemoPipeline:
    """The demo workspace, and its connector and pipeline over the site on `site_port`, each created once."""
    base_url = site_url(site_port)
    name = demo_pipeline_name(site_port)
    urls = [base_url + path for path in site_paths()]
    with transaction(sessions) as session:
        workspace = session.scalar(sa.select(Workspace).where(Workspace.name == DEMO_WORKSPACE))
        token = None
        if workspace is None:
            created = services.create_workspace(session, instance, name=DEMO_WORKSPACE, owner_user_id=DEMO_OWNER)
            workspace, token = created.workspace, created.api_token
        pipeline = session.scalar(
            sa.select(Pipeline).where(Pipeline.workspace_id == workspace.id, Pipeline.name == name)
        )
        if pipeline is None:
            connector = services.create_connector(
                session,
                instance,
                workspace_id=workspace.id,
                connector_type="webcrawler",
                urls=urls,
                name=f"{name} site",
            )
            pipeline = services.create_pipeline(
                session,
                instance,
                workspace_id=workspace.id,
                connector_id=connector.id,
                name=name,
                save_to_kb=True,
                folder_name=name,
            )
        else:
            # Its own port's URLs: this heals a connector an earlier demo re-pointed to another port.
            connector = session.get_one(Connector, pipeline.connector_id)
            set_initial_urls(connector, urls)
        return DemoPipeline(workspace.id, pipeline.id, pipeline.partition, token)


def with_loopback_allowed(settings: Settings) -> Settings:
    """The same settings, with loopback (where the demo site is) let past the crawler's SSRF guard."""
    return load_settings(crawler_allowed_networks=",".join([*settings.allowed_networks, LOOPBACK]))


def run_once(
    settings: Settings, sessions: sessionmaker[Session], instance: dg.DagsterInstance, *, site_port: int
) -> dict[str, Any]:
    """Serve the site, materialize the demo partition in-process, and summarize what landed."""
    with serve_site(port=site_port):
        demo = seed(sessions, instance, site_port=site_port)
        result = dg.materialize(
            [crawl_results, kb_documents],
            partition_key=demo.partition_key,
            instance=instance,
            resources=build_resources(with_loopback_allowed(settings)),
            tags=run_tags(pipeline_id=demo.pipeline_id, workspace_id=demo.workspace_id, trigger=Trigger.MANUAL),
        )
    crawl = CrawlMetadata.read(_metadata(result, CRAWL_RESULTS_ASSET))
    kb = _metadata(result, KB_DOCUMENTS_ASSET)
    with sessions() as session:
        ready = session.scalar(
            sa.select(sa.func.count())
            .select_from(Document)
            .where(Document.pipeline_id == demo.pipeline_id, Document.status_state == "ready")
        )
    summary = {
        "workspace_id": demo.workspace_id,
        "pipeline_id": demo.pipeline_id,
        "partition_key": demo.partition_key,
        "run_id": result.run_id,
        "urls_attempted": crawl.urls_attempted,
        "urls_succeeded": crawl.urls_succeeded,
        "urls_failed": crawl.urls_failed,
        "blob_key": crawl.blob_key,
        "blob_url": crawl.blob_url,
        "documents_created": kb["documents_created"],
        "documents_updated": kb["documents_updated"],
        "documents_unchanged": kb["documents_unchanged"],
        "documents": ready,
    }
    if demo.api_token:
        summary["api_token"] = demo.api_token
    summary["new_token_command"] = new_token_command(demo.workspace_id)
    return summary


def new_token_command(workspace_id: int) -> str:
    """How to get an API token of the demo workspace again: its first one is shown only once."""
    return f"pipelines-dagster token create --workspace {workspace_id} --name my-token"


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    # By asset, not by step: the crawl step also records the page changes this run has no step for.
    [event] = [event for event in result.get_asset_materialization_events() if event.asset_key == dg.AssetKey(asset)]
    return {key: value.value for key, value in event.materialization.metadata.items()}
