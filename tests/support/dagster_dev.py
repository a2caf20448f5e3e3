"""`dagster dev` on a temporary embedded default (deploy/dagster.yaml), as a user runs it, for end-to-end tests;
or on another instance config of deploy/ with the variables it reads.

The test process opens the same Dagster instance and app database, so it can seed pipelines,
launch runs through the webserver's GraphQL API and read what the runs did.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import create_engine, session_factory, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.partitions import add_pipeline_partitions
from tests.api.conftest import _location_loaded, free_port
from tests.support.processes import stop_group
from tests.support.web import WebServer, page

REPO_DIR = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCK_RELEASE_SENSORS = ("release_locks_of_failure_runs", "release_locks_of_canceled_runs")
START_TIMEOUT_SECONDS = 180
WILL_RETRY_TAG = "dagster/will_retry"
RUN_PROCESS_EVENT = re.compile(r"(?:Started process for run|Executing steps in process) \(pid: (\d+)\)")

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], *, timeout: float, every: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}", pytrace=False)


@dataclass
class Dev:
    """`dagster dev` on a temporary embedded default, and this process's view of the same stores."""

    process: subprocess.Popen
    home: Path
    ui_url: str
    instance: dg.DagsterInstance
    engine: sa.Engine
    site: WebServer
    env: dict[str, str]
    """The deployment's environment, for another process of it (a Celery worker)."""

    @property
    def sessions(self) -> sessionmaker[Session]:
        return session_factory(self.engine)

    def key(self, pipeline_id: int) -> str:
        """The pipeline's partition key, as the catalog stores it."""
        with self.sessions() as session:
            return session.get_one(Pipeline, pipeline_id).partition

    def log_tail(self) -> str:
        return (self.home / "dagster-dev.log").read_text(errors="replace")[-3000:]

    def ended(self, run_id: str) -> dg.DagsterRun | None:
        run = self.instance.get_run_by_id(run_id)
        return run if run is not None and run.is_finished else None

    def failed(self, run_id: str, *, timeout: float) -> dg.DagsterRun:
        """The run, once it failed and the instance has tagged whether it will retry it (just after the failure)."""

        def decided() -> dg.DagsterRun | None:
            run = self.ended(run_id)
            return run if run is not None and WILL_RETRY_TAG in run.tags else None

        run = wait_for(f"run {run_id} to fail", decided, timeout=timeout)
        assert run.status == dg.DagsterRunStatus.FAILURE, self.log_tail()
        return run

    def run_pid(self, run_id: str) -> int | None:
        """The process executing the run, from its engine events; in-process steps run in the run process."""
        pids = {
            int(match.group(1))
            for entry in self.instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
            if (match := RUN_PROCESS_EVENT.search(entry.message))
        }
        assert len(pids) <= 1, f"the run's steps ran outside its run process: {pids}"
        return pids.pop() if pids else None

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        """The data of a GraphQL request to the webserver, as the UI sends it."""
        answer = httpx.post(f"{self.ui_url}/graphql", json={"query": query, "variables": variables}, timeout=60)
        answer.raise_for_status()
        body = answer.json()
        assert "errors" not in body, body["errors"]
        return body["data"]


@dataclass(frozen=True)
class Seeded:
    workspace_id: int
    connector_id: int
    pipeline_id: int
    urls: list[str]
    save_to_kb: bool
    partition_key: str


def seed(
    dev: Dev,
    name: str,
    *,
    pages: int = 3,
    save_to_kb: bool = True,
    delay: float = 0.0,
    enabled: bool = True,
    topic: str | None = None,
    max_runtime_seconds: int | None = None,
    site: WebServer | None = None,
) -> Seeded:
    """A workspace with credit and a web connector over `pages` pages of its own (under /{name}/, each
    "Page n of {topic or name}.", titled "{topic or name} n", on `site`, else the deployment's), and a
    pipeline over it."""
    site = site or dev.site
    urls = []
    for n in range(pages):
        site.route(f"/{name}/{n}", page(f"{topic or name} {n}", f"Page {n} of {topic or name}.", delay=delay))
        urls.append(site.url(f"/{name}/{n}"))
    with transaction(dev.sessions) as session:
        workspace = create_workspace(session, name=name, owner_user_id=f"owner-{name}").workspace
        connector = create_connector(session, workspace_id=workspace.id, connector_type="webcrawler", urls=urls)
        pipeline = services.create_pipeline(
            session,
            dev.instance,
            workspace_id=workspace.id,
            connector_id=connector.id,
            name=name,
            save_to_kb=save_to_kb,
            folder_name=f"{name} docs" if save_to_kb else None,
            enabled=enabled,
            max_runtime_seconds=max_runtime_seconds,
        )
        seeded = Seeded(workspace.id, connector.id, pipeline.id, urls, save_to_kb, pipeline.partition)
    if not enabled:
        # The partition it had while enabled, as a Materialize dialog opened before it was disabled still
        # offers it: a launch on it meets the disabled pipeline.
        add_pipeline_partitions(dev.instance, [seeded.partition_key])
    Billing(dev.sessions, enabled=True, micros_per_crawl=1000).grant(seeded.workspace_id, 1_000_000)
    return seeded


def _sensors_ticked(instance: dg.DagsterInstance) -> bool:
    states = {state.name: state for state in instance.all_instigator_state()}
    return all(
        name in states and instance.get_ticks(states[name].instigator_origin_id, states[name].selector_id, limit=1)
        for name in LOCK_RELEASE_SENSORS
    )


@contextmanager
def dagster_dev(
    directory: Path,
    *,
    instance_config: Path = REPO_DIR / "deploy" / "dagster.yaml",
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Dev]:
    """`dagster dev` over workspace.yaml with deploy/dagster.yaml (or `instance_config`, given the variables it
    reads in `extra_env`), billing on, crawling a loopback site; the app database is SQLite in `directory` unless
    `extra_env` names one in PIPELINES_DATABASE_URL."""
    given = dict(extra_env or {})
    home, data = directory / "dagster-home", directory / "data"
    home.mkdir()
    data.mkdir()
    shutil.copy(instance_config, home / "dagster.yaml")
    port = free_port()
    ui_url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "DAGSTER_"))}
    env |= {
        "DAGSTER_HOME": str(home),
        "PIPELINES_DATA_DIR": str(data),
        "PIPELINES_CRAWLER_ALLOWED_NETWORKS": "127.0.0.1/32",
        "PIPELINES_BILLING_ENABLED": "true",
        "PIPELINES_DAGSTER_URL": ui_url,
        # The deployment's runs share its own extraction slots, as a machine's do, not those of every test here.
        "PIPELINES_EXTRACTION_SLOTS_DIR": str(data / "extraction-slots"),
    }
    env |= given
    engine = create_engine(env.get("PIPELINES_DATABASE_URL") or f"sqlite:///{(data / 'app.sqlite3').resolve()}")
    upgrade(engine)
    with pytest.MonkeyPatch.context() as patch, WebServer() as site:
        # This process seeds and launches on the same instance; deploy/dagster.yaml reads DAGSTER_HOME, the
        # other configs their own variables too.
        for name, value in {"DAGSTER_HOME": str(home), "PIPELINES_DAGSTER_URL": ui_url, **given}.items():
            patch.setenv(name, value)
        instance = dg.DagsterInstance.from_config(str(home))
        process = subprocess.Popen(
            [str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO_DIR,
            env=env,
            stdout=(home / "dagster-dev.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deployment = Dev(
            process=process, home=home, ui_url=ui_url, instance=instance, engine=engine, site=site, env=env
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            # Up means the webserver has loaded the code location and both lock-release sensors have
            # ticked once: a run-status sensor's first tick only sets its cursor, so it would skip an
            # earlier failure.
            while not (_location_loaded(ui_url) and _sensors_ticked(instance)):
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"dagster dev did not come up:\n{deployment.log_tail()}", pytrace=False)
                time.sleep(0.5)
            yield deployment
        finally:
            stop_group(process)
            instance.dispose()
            engine.dispose()
