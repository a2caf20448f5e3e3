"""The API over real services: app database, Dagster instance, blob store, and a real Dagster webserver."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest
import sqlalchemy as sa
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.api.app import create_app
from pipelines_dagster.app_db.engine import create_engine, session_factory, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.workspaces import create_api_token, create_workspace
from pipelines_dagster.launch import GraphQLLauncher, Launcher
from pipelines_dagster.resources.blob_store import S3BlobStoreResource
from pipelines_dagster.settings import Settings, load_settings
from tests.assets.conftest import Stack, embedded, production, stack, web  # noqa: F401  (fixtures)
from tests.support.processes import stop_group

REPO_DIR = Path(__file__).resolve().parents[2]
WEBSERVER_START_SECONDS = 90

PIPELINES = "/workspaces/{workspace_id}/pipelines"
PIPELINE = f"{PIPELINES}/{{pipeline_id}}"
RUN = f"{PIPELINE}/runs/{{run_id}}"
# The operations this API's pipelines and runs routers serve, as Schemathesis labels them.
PIPELINE_OPERATIONS = frozenset(
    {
        f"GET {PIPELINES}",
        f"POST {PIPELINES}",
        f"GET {PIPELINE}",
        f"PUT {PIPELINE}",
        f"PATCH {PIPELINE}",
        f"DELETE {PIPELINE}",
        f"POST {PIPELINE}/run",
        f"GET {PIPELINE}/runs",
        f"GET {RUN}",
        f"GET {RUN}/result",
        f"GET {PIPELINE}/documents/{{document_id}}",
    }
)
NOTIFICATIONS = "/workspaces/{workspace_id}/notifications"
ENDPOINT = f"{NOTIFICATIONS}/{{endpoint_id}}"
# The notifications router's operations, and the page change its pages.changed messages link to.
NOTIFICATION_OPERATIONS = frozenset(
    {
        f"GET {NOTIFICATIONS}",
        f"POST {NOTIFICATIONS}",
        f"GET {ENDPOINT}",
        f"DELETE {ENDPOINT}",
        f"POST {ENDPOINT}/rotate-secret",
        f"POST {ENDPOINT}/enable",
        f"POST {ENDPOINT}/disable",
        f"POST {ENDPOINT}/test",
        f"GET {ENDPOINT}/deliveries",
        f"GET {ENDPOINT}/deliveries/{{delivery_id}}",
        f"POST {ENDPOINT}/redrive",
        f"GET {PIPELINE}/changes/{{change_id}}",
    }
)
# Settings that let notifications (and crawls) reach the tests' receivers on 127.0.0.1.
LOOPBACK_ALLOWED = {"crawler_allowed_networks": "127.0.0.1/32"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Webserver:
    """A running deployment: the webserver's URL, its Dagster instance and its app database."""

    url: str
    instance: dg.DagsterInstance
    engine: sa.Engine

    @property
    def sessions(self) -> sessionmaker[Session]:
        return session_factory(self.engine)

    def launcher(self) -> Launcher:
        return GraphQLLauncher(self.url)


def _location_loaded(url: str) -> bool:
    query = "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }"
    try:
        entries = httpx.post(f"{url}/graphql", json={"query": query}, timeout=5).json()["data"]["workspaceOrError"][
            "locationEntries"
        ]
    except (httpx.HTTPError, KeyError, TypeError, ValueError):
        return False
    return bool(entries) and all(entry["loadStatus"] == "LOADED" for entry in entries)


@pytest.fixture(scope="session")
def dagster_webserver(tmp_path_factory) -> Iterator[Webserver]:
    """`dagster-webserver` over workspace.yaml, on a temp DAGSTER_HOME with the embedded instance config.

    No daemon runs, so launched runs stay queued; the test process reads the same instance. The app
    database lives as long, so pipeline ids (partition keys) never repeat within the session.
    """
    home = tmp_path_factory.mktemp("dagster-home")
    engine = create_engine(f"sqlite:///{home / 'app.sqlite3'}")
    upgrade(engine)
    config = yaml.safe_load((REPO_DIR / "deploy" / "dagster.yaml").read_text())
    # deploy/dagster.yaml names its storage by $DAGSTER_HOME; both processes must find it without it.
    config["storage"]["sqlite"]["base_dir"] = str(home)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIPELINES_")}
    env |= {
        "DAGSTER_HOME": str(home),
        "PIPELINES_DATA_DIR": str(home / "data"),
        "PIPELINES_DATABASE_URL": engine.url.render_as_string(hide_password=False),
    }
    log = (home / "webserver.log").open("wb")
    webserver = Path(sys.executable).with_name("dagster-webserver")
    process = subprocess.Popen(
        [str(webserver), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        # Its own process group, so stopping it also stops the code server it spawns.
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + WEBSERVER_START_SECONDS
        while not _location_loaded(url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (home / "webserver.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"dagster-webserver did not come up at {url}:\n{tail}", pytrace=False)
            time.sleep(0.25)
        assert httpx.get(f"{url}/server_info", timeout=5).status_code == 200
        instance = dg.DagsterInstance.from_config(str(home))
        yield Webserver(url=url, instance=instance, engine=engine)
        instance.dispose()
    finally:
        stop_group(process)
        log.close()
        engine.dispose()


def settings_for(
    engine: sa.Engine,
    data_dir: Path,
    *,
    blob_store: str | None = None,
    s3_endpoint_url: str | None = None,
    **overrides: Any,
) -> Settings:
    """Settings over this app database and blob store; `overrides` set any other setting."""
    return load_settings(
        data_dir=data_dir,
        database_url=engine.url.render_as_string(hide_password=False),
        blob_store=blob_store or str(data_dir / "blobs"),
        s3_endpoint_url=s3_endpoint_url,
        **overrides,
    )


def stack_settings(of: Stack, data_dir: Path) -> Settings:
    """Settings naming the stack's own app database and blob store, as a deployment's environment would."""
    store = of.blob_store
    if isinstance(store, S3BlobStoreResource):
        return settings_for(
            of.engine, data_dir, blob_store=f"s3://{store.bucket}/{store.prefix}", s3_endpoint_url=store.endpoint_url
        )
    return settings_for(of.engine, data_dir, blob_store=store.root)


@pytest.fixture
def client_for(tmp_path) -> Iterator:
    """Build a TestClient over the real app; each is closed (lifespan shut down) after the test."""
    opened: list[TestClient] = []

    def build(settings: Settings, instance: dg.DagsterInstance, launcher: Launcher | None = None) -> TestClient:
        client = TestClient(create_app(settings=settings, instance=instance, launcher=launcher))
        client.__enter__()
        opened.append(client)
        return client

    yield build
    for client in opened:
        client.__exit__(None, None, None)


@dataclass(frozen=True)
class Tenant:
    """A workspace with its API token and, when made here, a webcrawler connector."""

    workspace_id: int
    token: str
    connector_id: int | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def pipelines(self) -> str:
        return f"/workspaces/{self.workspace_id}/pipelines"


def new_tenant(
    sessions: sessionmaker[Session],
    *,
    urls: list[str] | None = None,
    name: str = "acme",
    index_every_minutes: int | None = None,
) -> Tenant:
    with transaction(sessions) as session:
        created = create_workspace(session, name=name, owner_user_id=f"owner-{name}")
        connector = create_connector(
            session,
            workspace_id=created.workspace.id,
            connector_type="webcrawler",
            urls=urls or ["https://docs.example.com/"],
            index_every_minutes=index_every_minutes,
        )
        return Tenant(created.workspace.id, created.api_token, connector.id)


def issue_token(sessions: sessionmaker[Session], workspace_id: int) -> str:
    with transaction(sessions) as session:
        return create_api_token(session, workspace_id, name=f"test-{uuid.uuid4().hex[:8]}").token


def tenants_of(
    stack: Stack, client_for, data_dir: Path, workspaces: dict[str, int]
) -> tuple[TestClient, dict[str, Tenant]]:
    """A client over the stack's deployment (launching nowhere) and a token for each named workspace."""
    client = client_for(
        stack_settings(stack, data_dir), stack.instance, GraphQLLauncher(f"http://127.0.0.1:{free_port()}")
    )
    return client, {name: Tenant(ws, issue_token(stack.sessions, ws)) for name, ws in workspaces.items()}


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance


@pytest.fixture
def nowhere() -> Launcher:
    """A launcher aimed at a port nothing listens on: a test that launches by mistake gets a 503."""
    return GraphQLLauncher(f"http://127.0.0.1:{free_port()}")


@pytest.fixture
def client(app_engine, instance, client_for, nowhere, tmp_path) -> TestClient:
    """The app on each app-database backend, with a test Dagster instance."""
    return client_for(settings_for(app_engine, tmp_path / "data"), instance, nowhere)


@pytest.fixture
def tenant(sessions) -> Tenant:
    return new_tenant(sessions)


@pytest.fixture
def other(sessions) -> Tenant:
    return new_tenant(sessions, name="globex")
