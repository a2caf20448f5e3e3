"""A run's process killed -9 mid-crawl, under `dagster dev` on the embedded default, as a user runs it.

The run must end FAILURE, take its extraction workers with it, and leave no lock behind once the
lock-release sensor has ticked; the pipeline's next run then succeeds, and only it is charged.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import dagster as dg
import psutil
import pytest
import sqlalchemy as sa

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import create_engine, session_factory, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import CreditAccount, CreditLedgerEntry
from pipelines_dagster.core import catalog
from pipelines_dagster.core.billing import Billing
from pipelines_dagster.core.locks import DatabaseLocks, connector_lock_name, pipeline_lock_name
from pipelines_dagster.launch import GraphQLLauncher, launch_pipeline_run
from tests.api.conftest import _location_loaded, free_port
from tests.support.processes import stop_group
from tests.support.web import Reply, WebServer, html_document, page

REPO_DIR = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.integration

PAGES = 20
# Each reply waits this long; at four requests per host at a time the crawl lasts about 5 s.
PAGE_DELAY_SECONDS = 1.0
# Answered at once, and about 10 s of extraction (many tiny paragraphs): the kill finds a worker inside it.
HEAVY_PAGE = html_document("Heavy", "\n\n".join(f"w{n} x" for n in range(70000)))
# Dagster's code server notices a dead run process within a second; a minute is the outer bound.
FAILED_WITHIN_SECONDS = 60.0
# A worker watches its parent, so it goes within a second of it, whatever page it is on.
WORKERS_GONE_WITHIN_SECONDS = 3.0
# A user relaunching at once is not kept waiting: the new run takes over locks whose owner Dagster
# has ended (tests/assets/test_pipeline_run.py). Nobody relaunching, the lock-release sensor frees
# them within two of its 10 s ticks; half a minute is what a user would accept to see them gone.
LOCKS_FREED_WITHIN_SECONDS = 30.0
SECOND_RUN_WITHIN_SECONDS = 90.0
LOCK_RELEASE_SENSORS = ("release_locks_of_failure_runs", "release_locks_of_canceled_runs")
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

    @property
    def sessions(self):
        return session_factory(self.engine)

    def log_tail(self) -> str:
        return (self.home / "dagster-dev.log").read_text(errors="replace")[-3000:]

    def ended(self, run_id: str) -> dg.DagsterRun | None:
        run = self.instance.get_run_by_id(run_id)
        return run if run is not None and run.is_finished else None


def _sensors_ticked(instance: dg.DagsterInstance) -> bool:
    states = {state.name: state for state in instance.all_instigator_state()}
    return all(
        name in states and instance.get_ticks(states[name].instigator_origin_id, states[name].selector_id, limit=1)
        for name in LOCK_RELEASE_SENSORS
    )


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    home, data = tmp_path / "dagster-home", tmp_path / "data"
    home.mkdir()
    data.mkdir()
    shutil.copy(REPO_DIR / "deploy" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    ui_url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "DAGSTER_"))}
    env |= {
        "DAGSTER_HOME": str(home),
        "PIPELINES_DATA_DIR": str(data),
        "PIPELINES_CRAWLER_ALLOWED_NETWORKS": "127.0.0.1/32",
        "PIPELINES_BILLING_ENABLED": "true",
        "PIPELINES_DAGSTER_URL": ui_url,
    }
    engine = create_engine(f"sqlite:///{(data / 'app.sqlite3').resolve()}")
    upgrade(engine)
    with pytest.MonkeyPatch.context() as patch, WebServer() as site:
        # This process seeds and launches on the same instance; deploy/dagster.yaml reads DAGSTER_HOME.
        patch.setenv("DAGSTER_HOME", str(home))
        patch.setenv("PIPELINES_DAGSTER_URL", ui_url)
        instance = dg.DagsterInstance.from_config(str(home))
        process = subprocess.Popen(
            [str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO_DIR, env=env, stdout=(home / "dagster-dev.log").open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deployment = Dev(process=process, home=home, ui_url=ui_url, instance=instance, engine=engine, site=site)
        try:
            deadline = time.monotonic() + 180
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


def _seed(dev: Dev) -> tuple[int, int, int]:
    """A workspace with credit, a web connector over a heavy page and PAGES slow ones, and a KB pipeline."""
    dev.site.route("/heavy", Reply(body=HEAVY_PAGE))
    urls = [dev.site.url("/heavy")]
    for n in range(PAGES):
        dev.site.route(f"/slow/{n}", page(f"Slow {n}", f"Page {n} answers after a second.", delay=PAGE_DELAY_SECONDS))
        urls.append(dev.site.url(f"/slow/{n}"))
    with transaction(dev.sessions) as session:
        workspace = catalog.create_workspace(session, name="crash", owner_user_id="owner").workspace
        connector = catalog.create_connector(session, workspace_id=workspace.id, connector_type="webcrawler",
                                             urls=urls)
        pipeline = services.create_pipeline(session, dev.instance, workspace_id=workspace.id,
                                            connector_id=connector.id, name="crash", save_to_kb=True)
        ids = workspace.id, connector.id, pipeline.id
    Billing(dev.sessions, enabled=True, micros_per_crawl=1000).grant(ids[0], 1_000_000)
    return ids


def _run_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The process executing the run, from its engine events; in-process steps run in the run process."""
    pids = {
        int(match.group(1))
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
        if (match := RUN_PROCESS_EVENT.search(entry.message))
    }
    assert len(pids) <= 1, f"the run's steps ran outside its run process: {pids}"
    return pids.pop() if pids else None


def _extraction_workers(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    workers = []
    for child in children:
        try:
            if "pipelines_dagster.core.extract_workers" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.Error:
            continue
    return workers


def _cpu_seconds(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return times.user + times.system


def _alive(process: psutil.Process) -> bool:
    """Still running: a zombie has exited (its new parent may not reap it at once)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_run_killed_mid_crawl_fails_frees_its_workers_and_locks_and_the_next_run_succeeds(dev: Dev) -> None:
    workspace_id, connector_id, pipeline_id = _seed(dev)
    launcher = GraphQLLauncher(dev.ui_url)
    run_id = launch_pipeline_run(dev.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id, launcher=launcher)

    def crawling() -> int | None:
        pid = _run_pid(dev.instance, run_id)
        if pid is None or not any(request.path.startswith("/slow/") for request in dev.site.requests):
            return None
        # A worker's start-up costs a few tenths of a CPU-second; past a whole one it is inside the heavy page.
        return pid if any(_cpu_seconds(worker) >= 1.0 for worker in _extraction_workers(pid)) else None

    run_pid = wait_for("the run to be crawling, a worker inside the heavy page", crawling, timeout=90)
    locks = DatabaseLocks(dev.engine)
    lock_names = [pipeline_lock_name(pipeline_id), connector_lock_name(connector_id)]
    assert [locks.owner_of(name) for name in lock_names] == [run_id, run_id]

    workers = _extraction_workers(run_pid)
    assert workers
    os.kill(run_pid, signal.SIGKILL)
    killed = time.monotonic()

    def gone() -> bool:
        return not any(_alive(worker) for worker in workers)

    wait_for(f"extraction workers {[worker.pid for worker in workers]} to exit", gone,
             timeout=WORKERS_GONE_WITHIN_SECONDS, every=0.05)
    workers_gone = time.monotonic() - killed

    run = wait_for("the killed run to end", lambda: dev.ended(run_id), timeout=FAILED_WITHIN_SECONDS)
    failed_after = time.monotonic() - killed
    assert run.status == dg.DagsterRunStatus.FAILURE, dev.log_tail()

    wait_for("the lock-release sensor to free the run's locks",
             lambda: all(locks.owner_of(name) is None for name in lock_names),
             timeout=LOCKS_FREED_WITHIN_SECONDS - (time.monotonic() - killed))
    locks_freed = time.monotonic() - killed
    assert not [worker.pid for worker in workers if _alive(worker)]

    relaunched = time.monotonic()
    second_id = launch_pipeline_run(dev.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id,
                                    launcher=launcher)
    second = wait_for("the second run to end", lambda: dev.ended(second_id), timeout=SECOND_RUN_WITHIN_SECONDS)
    second_took = time.monotonic() - relaunched
    assert second.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()

    # The charge is made once after a crawl ends and keyed by the root run: a run killed before
    # that made none, and a succeeded run makes exactly one.
    with dev.sessions() as session:
        charges = session.scalars(
            sa.select(CreditLedgerEntry.idempotency_key).join(CreditAccount)
            .where(CreditAccount.workspace_id == workspace_id, CreditLedgerEntry.kind == "charge")
        ).all()
    assert charges == [f"crawl:{second_id}:{pipeline_id}"]
    print(
        f"\nkill -9 of run process {run_pid}: workers gone after {workers_gone:.2f} s, run FAILURE after "
        f"{failed_after:.2f} s, locks freed after {locks_freed:.2f} s; the second run took {second_took:.2f} s"
    )
