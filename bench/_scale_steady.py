"""(d) of bench/scale.py, steady state on the Celery profile: N one-page KB pipelines on hourly schedules, their
minutes spread evenly over the hour (N / 60 falling due each minute), run for M minutes by the real daemon
(`dagster dev` on deploy/dagster.celery.yaml: PostgreSQL storage, runs sent through RabbitMQ, task states in
Redis) and one `pipelines-dagster worker`, on fresh PostgreSQL databases and a queue and key prefix of its own.

Each workspace (100 pipelines) has a notification endpoint for run.* on a local receiver (bench/_receiver.py).
Warm-up until the first full minute after a minute of load, then M minutes measured:

- fires due in the window vs pipelines crawled for them (crawl_results materializations carrying the fire);
- the largest lag of a fire behind its due time: its run's RUN_START, and its crawl's materialization;
- notification lag, run end -> delivery queued and -> delivered (p50, p95, max);
- peak PostgreSQL connections of the deployment's databases (pg_stat_activity sampled twice a second, by
  process), vs `max_connections`;
- event-log bytes per crawl (the event rows of the window's runs) and what the Dagster database grows per
  crawl, as GB a day at this rate;
- CPU per crawl of the worker, daemon, code server and webserver, and from it what 100,000 hourly pipelines
  need: pool processes, cores, database connections and transactions.

Targets (issue 26, 6 (d) and 4): no fire's run starts later than 60 s after its due time; every run.* notification
queued within 30 s of its run's end; peak connections <= 80 % of max_connections; every fire due crawled. Run
alone (`python bench/_scale_steady.py [--smoke]`) it exits 1 on a miss; `--smoke` (20 pipelines all due at one minute,
half a minute measured, no warm-up) judges only that every fire was crawled and notified.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _celery import celery_profile
from _corpus import (
    BIN,
    OUR_LOCATION,
    OUR_LOCATION_YAML,
    DagsterDev,
    KiB,
    dagster_dev_parts,
    free_port,
    served_corpus,
    wait_for,
)
from _receiver import Receiver
from history_query import fresh_databases

POSTGRES_URL = os.environ.get("PIPELINES_BENCH_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")
BROKER_URL = os.environ.get("PIPELINES_BENCH_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("PIPELINES_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
SEED = 20261205
PAGES = 1000
PAGE_BYTES = 20 * KiB
PIPELINES_PER_WORKSPACE = 100
RECEIVER_PATHS = 10
CREDIT_MICROS = 10**12
# A pool process waits on the databases for most of a crawl (0.1 CPU-s of 1-3.5 s of wall time, measured), so the
# worker has more of them than the machine has cores.
CONCURRENCY = 4
# The targets: issue 26, 6 (d) and 4.
FIRE_LAG_TARGET = 60.0
NOTIFY_LAG_TARGET = 30.0
CONNECTIONS_SHARE_TARGET = 0.8
# What 100,000 hourly pipelines need is sized to keep each part this busy at most.
SIZING_PIPELINES = 100_000
HEADROOM = 0.7
# After the window, how long its last fires and their notifications may take before the bench reports them missing.
DRAIN_SECONDS = 300.0
SMOKE_PIPELINES, SMOKE_MINUTES = 20, 0.5
SENSORS = ("pipeline_schedules", "notify_success_runs", "notify_failure_runs", "notification_sender")
RUN_EVENTS = ("run.succeeded", "run.failed", "run.canceled")


@dataclass(frozen=True)
class Figure:
    """One printed figure: `target` says what it is judged against (None: reported only), `ok` whether it met it."""

    label: str
    value: float
    unit: str
    target: str | None = None
    ok: bool = True

    def __str__(self) -> str:
        judged = f"  (target {self.target}: {'ok' if self.ok else 'MISSED'})" if self.target else ""
        return f"{self.label}: {self.value:,.{2 if abs(self.value) < 100 else 0}f} {self.unit}{judged}"


# -- the deployment -----------------------------------------------------------------------------------------------


@contextmanager
def database(label: str) -> Iterator[str]:
    """A new PostgreSQL database beside POSTGRES_URL's, dropped afterwards: its URL."""
    with fresh_databases(POSTGRES_URL, f"bench_steady_{label}_{uuid.uuid4().hex[:6]}") as [url]:
        yield url


class CeleryHome:
    """The Celery profile in a temporary directory: DAGSTER_HOME with `celery_config`, the app database and
    Dagster's storage on fresh PostgreSQL databases, the crawler allowed onto loopback, billing on. `env` is the
    deployment's environment; this process is switched onto the same stores, to seed them and read the runs."""

    def __init__(self, *, pool_processes: int) -> None:
        self._exit = ExitStack()
        self.queue = f"bench-steady-{uuid.uuid4().hex[:8]}"
        self.pool_processes = pool_processes

    def __enter__(self) -> CeleryHome:
        import dagster as dg

        from pipelines_dagster.app_db.engine import create_engine, session_factory
        from pipelines_dagster.app_db.migrate import upgrade

        self.dir = Path(self._exit.enter_context(tempfile.TemporaryDirectory(prefix="scale-steady-")))
        self.dagster_url = self._exit.enter_context(database("dagster"))
        self.app_url = self._exit.enter_context(database("app"))
        home = self.dir / "dagster-home"
        home.mkdir()
        (home / "dagster.yaml").write_text(
            celery_profile(self.dir, self.queue, pool_processes=self.pool_processes).read_text()
        )
        self.env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINES_", "DAGSTER_"))}
        self.env |= {
            "DAGSTER_HOME": str(home),
            "DAGSTER_PG_URL": self.dagster_url,
            "PIPELINES_DATABASE_URL": self.app_url,
            "PIPELINES_CELERY_BROKER_URL": BROKER_URL,
            "PIPELINES_CELERY_BACKEND_URL": REDIS_URL,
            "PIPELINES_DATA_DIR": str(self.dir / "data"),
            "PIPELINES_CRAWLER_ALLOWED_NETWORKS": "127.0.0.1/32",
            "PIPELINES_BILLING_ENABLED": "true",
            "PIPELINES_DAGSTER_URL": f"http://127.0.0.1:{free_port()}",
        }
        # Put back afterwards: bench/scale.py measures other parts in this process.
        saved = dict(os.environ)
        self._exit.callback(lambda: (os.environ.clear(), os.environ.update(saved)))
        os.environ.clear()
        os.environ.update(self.env)
        self.engine = create_engine(self.app_url)
        self._exit.callback(self.engine.dispose)
        upgrade(self.engine)
        self.sessions = session_factory(self.engine)
        self.instance = dg.DagsterInstance.get()
        self._exit.callback(self.instance.dispose)
        self._exit.callback(self._clean_broker)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit.close()

    def _clean_broker(self) -> None:
        """What the runs left on the shared broker and Redis: the queue, and the task states."""
        import redis

        with self.instance.run_launcher.celery.connection_for_write() as connection:  # type: ignore[attr-defined]
            connection.default_channel.queue_delete(self.queue)
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{self.queue}:*"):
            client.delete(key)
        client.close()


@contextmanager
def celery_worker(home: CeleryHome, *, concurrency: int) -> Iterator[subprocess.Popen[bytes]]:
    """`pipelines-dagster worker` from a directory of its own, once Celery says it is ready."""
    directory = home.dir / "worker"
    directory.mkdir()
    log = directory / "worker.log"
    process = subprocess.Popen(
        [str(BIN / "pipelines-dagster"), "worker", "--name", "steady", "--concurrency", str(concurrency)],
        cwd=directory,
        env=home.env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise SystemExit(f"the worker exited with code {process.returncode}; see {log}")
            return b" ready." in log.read_bytes()

        wait_for("the Celery worker to get ready", ready, timeout=120, every=0.2)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


# -- seeding ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """When the window runs and which minute of the hour each pipeline is due at."""

    pipelines: int
    window_start: datetime
    window_seconds: float
    first_minute: int
    spread: int

    def minute_of(self, number: int) -> int:
        return (self.first_minute + number % self.spread) % 60

    def schedule_of(self, number: int) -> Any:
        from pipelines_dagster.core.catalog.schedules import ScheduleSpec

        return ScheduleSpec(cron=f"{self.minute_of(number)} * * * *", timezone="UTC")

    def due_times(self) -> list[datetime]:
        """The minute boundaries falling due in the window."""
        ends = self.window_start + timedelta(seconds=self.window_seconds)
        times, moment = [], self.window_start
        while moment < ends:
            times.append(moment)
            moment += timedelta(minutes=1)
        return times

    def fires_due(self) -> int:
        minutes = [moment.minute for moment in self.due_times()]
        return sum(minutes.count(self.minute_of(number)) for number in range(self.pipelines))


def next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


def seed(home: CeleryHome, receiver: Receiver, urls: Sequence[str], plan: Plan) -> tuple[list[int], float]:
    """The pipelines in workspaces of PIPELINES_PER_WORKSPACE with credit and a run.* endpoint each, in one
    transaction: each workspace's first pipeline (a web connector over one URL, an hourly schedule, a KB folder) as
    `pipelines-dagster pipeline create` makes it, the others copies of its rows; their partitions added in one call,
    as services.create_pipeline adds each one's: (pipeline ids, seconds)."""
    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.core.catalog.connectors import create_connector
    from pipelines_dagster.core.catalog.pipelines import create_pipeline, pipeline_partitions
    from pipelines_dagster.core.catalog.workspaces import create_workspace
    from pipelines_dagster.core.ledger.billing import Billing
    from pipelines_dagster.core.security.network_policy import NetworkPolicy
    from pipelines_dagster.notifications.destination import DestinationGuard
    from pipelines_dagster.notifications.endpoints import create_endpoint
    from pipelines_dagster.partitions import add_pipeline_partitions

    started = time.perf_counter()
    guard = DestinationGuard(NetworkPolicy(allowed_networks=(home.env["PIPELINES_CRAWLER_ALLOWED_NETWORKS"],)))
    pipeline_ids, workspace_ids = [], []
    with transaction(home.sessions) as session:
        for first in range(0, plan.pipelines, PIPELINES_PER_WORKSPACE):
            workspace_id = create_workspace(
                session, name=f"steady {first}", owner_user_id=f"bench-steady-{first}"
            ).workspace.id
            workspace_ids.append(workspace_id)
            create_endpoint(
                session,
                guard,
                workspace_id=workspace_id,
                url=receiver.hook_url(len(workspace_ids) % receiver.paths),
                event_types=RUN_EVENTS,
                description="steady-state bench",
            )
            connector = create_connector(
                session, workspace_id=workspace_id, connector_type="webcrawler", urls=[urls[0]], name=f"site {first}"
            )
            pipeline = create_pipeline(
                session,
                workspace_id=workspace_id,
                connector_id=connector.id,
                name=f"hourly {first}",
                folder_name="docs",
                schedule=plan.schedule_of(first),
            )
            session.flush()
            numbers = range(first, min(first + PIPELINES_PER_WORKSPACE, plan.pipelines))
            pipeline_ids += copy_pipeline(session, pipeline.id, numbers, plan, urls)
        keys = pipeline_partitions(session, pipeline_ids)
    add_pipeline_partitions(home.instance, keys.values())
    billing = Billing(home.sessions, enabled=True, micros_per_crawl=1000)
    for workspace_id in workspace_ids:
        billing.grant(workspace_id, CREDIT_MICROS)
    return pipeline_ids, time.perf_counter() - started


def copy_pipeline(session: Any, template_id: int, numbers: range, plan: Plan, urls: Sequence[str]) -> list[int]:
    """The rows of the catalog's pipeline `template_id`, its connector's and its triggers', made over for
    `numbers` (the first is the template itself, given its own URL): each a name, a URL and a minute of its own.
    Ids come from the tables' sequences (PostgreSQL), so each table takes one multi-row insert."""
    import sqlalchemy as sa

    from pipelines_dagster.app_db.models import Connector, Pipeline, PipelineTrigger, TriggerKind, partition_key

    def row(model: Any, **where: Any) -> list[dict[str, Any]]:
        query = sa.select(model.__table__).filter_by(**where).order_by(model.__table__.c.id)
        return [dict(found) for found in session.execute(query).mappings()]

    def ids(model: Any, count: int) -> list[int]:
        table = model.__table__.name
        query = sa.text(f"SELECT nextval(pg_get_serial_sequence('{table}', 'id')) FROM generate_series(1, :n)")
        return list(session.execute(query, {"n": count}).scalars())

    [pipeline] = row(Pipeline, id=template_id)
    [connector] = row(Connector, id=pipeline["connector_id"])
    triggers = row(PipelineTrigger, pipeline_id=template_id)
    session.execute(
        sa.update(Connector)
        .where(Connector.id == connector["id"])
        .values(config={**connector["config"], "INITIAL_URLS": [urls[numbers[0] % len(urls)]]})
    )
    others = numbers[1:]
    if not others:
        return [template_id]
    connector_ids, pipeline_ids = ids(Connector, len(others)), ids(Pipeline, len(others))
    now = datetime.now(UTC)
    session.execute(
        sa.insert(Connector.__table__),
        [
            connector | {"id": cid, "name": f"site {number}", "config": {**connector["config"], "INITIAL_URLS": [url]}}
            for cid, number, url in zip(connector_ids, others, (urls[n % len(urls)] for n in others), strict=True)
        ],
    )
    session.execute(
        sa.insert(Pipeline.__table__),
        [
            pipeline | {"id": pid, "connector_id": cid, "name": name, "partition_key": partition_key(pid, name)}
            for pid, cid, name in zip(pipeline_ids, connector_ids, (f"hourly {n}" for n in others), strict=True)
        ],
    )
    copies = []
    for pid, number in zip(pipeline_ids, others, strict=True):
        for trigger in triggers:
            copy = trigger | {"pipeline_id": pid}
            if trigger["kind"] == TriggerKind.SCHEDULE.value:
                spec = plan.schedule_of(number)
                copy |= {"cron": spec.cron, "next_fire_at": spec.next_fire_after(now)}
            copies.append(copy)
    for copy, tid in zip(copies, ids(PipelineTrigger, len(copies)), strict=True):
        copy["id"] = tid
    session.execute(sa.insert(PipelineTrigger.__table__), copies)
    return [template_id, *pipeline_ids]


# -- sampling -----------------------------------------------------------------------------------------------------


def process_parts(dev: DagsterDev, worker: subprocess.Popen[bytes]) -> Iterator[tuple[str, Any]]:
    """(part, psutil process) of each live process of the deployment: the parts of `dagster dev`, and "worker"."""
    import psutil

    assert dev.process is not None
    for part, process, _command in dagster_dev_parts(dev.process.pid):
        yield ("code server" if part.startswith("code server") else part), process
    try:
        root = psutil.Process(worker.pid)
        for process in [root, *root.children(recursive=True)]:
            yield "worker", process
    except psutil.NoSuchProcess:
        return


def cpu_by_part(dev: DagsterDev, worker: subprocess.Popen[bytes]) -> dict[str, float]:
    """CPU seconds used so far by each part, with the processes each has reaped (pool processes replaced, extraction
    workers)."""
    import psutil

    parts: dict[str, float] = {}
    for part, process in process_parts(dev, worker):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        parts[part] = parts.get(part, 0.0) + times.user + times.system + times.children_user + times.children_system
    return parts


def machine_cpu() -> float:
    import psutil

    times = psutil.cpu_times()
    return times.user + times.system + times.nice


class ConnectionSampler:
    """pg_stat_activity sampled every `interval` seconds on a connection of its own: the peak count on the
    deployment's databases, which process held each connection at that peak, and the server's peak count."""

    def __init__(self, dev: DagsterDev, worker: subprocess.Popen[bytes], databases: list[str], *, interval: float):
        import sqlalchemy as sa

        self._engine = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", pool_size=1)
        self._dev, self._worker, self._databases, self._interval = dev, worker, databases, interval
        self.peak = self.peak_server = 0
        self.peak_by_part: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connections", daemon=True)
        with self._engine.connect() as conn:
            self.max_connections = int(conn.exec_driver_sql("SHOW max_connections").scalar_one())

    def _attribute(self, ports: list[int]) -> dict[str, int]:
        """Which part of the deployment holds each connection, by its client port."""
        import psutil

        owners: dict[int, str] = {}
        for part, process in process_parts(self._dev, self._worker):
            try:
                for connection in process.net_connections(kind="tcp"):
                    if connection.laddr and connection.raddr and connection.raddr.port == 5432:
                        owners[connection.laddr.port] = part
            except psutil.Error:
                continue
        counts: dict[str, int] = {}
        for port in ports:
            part = owners.get(port, "this bench" if port in self._own_ports() else "closed before attributed")
            counts[part] = counts.get(part, 0) + 1
        return counts

    def _own_ports(self) -> set[int]:
        import psutil

        return {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.laddr}

    def _run(self) -> None:
        import sqlalchemy as sa

        query = sa.text("SELECT datname, client_port FROM pg_stat_activity WHERE backend_type = 'client backend'")
        while not self._stop.wait(self._interval):
            with self._engine.connect() as conn:
                rows = conn.execute(query).all()
            self.samples += 1
            ours = [port for name, port in rows if name in self._databases]
            # The sampler's own connection is to another database; the server's count leaves it out too.
            self.peak_server = max(self.peak_server, len(rows) - 1)
            if len(ours) > self.peak:
                self.peak = len(ours)
                self.peak_by_part = self._attribute([port for port in ours if port is not None])

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._engine.dispose()


@dataclass
class Snapshot:
    """What the deployment had used by a moment: CPU by part, the machine's CPU, the Dagster database's size and
    both databases' transactions."""

    at: float
    cpu: dict[str, float]
    machine: float
    dagster_bytes: int
    transactions: int
    sessions: int


def snapshot(home: CeleryHome, dev: DagsterDev, worker: subprocess.Popen[bytes]) -> Snapshot:
    import sqlalchemy as sa

    names = [sa.make_url(url).database for url in (home.dagster_url, home.app_url)]
    engine = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            dagster_bytes = conn.execute(sa.text("SELECT pg_database_size(:name)"), {"name": names[0]}).scalar_one()
            transactions, sessions = conn.execute(
                sa.text(
                    "SELECT sum(xact_commit + xact_rollback), sum(sessions) FROM pg_stat_database "
                    "WHERE datname = ANY(:names)"
                ),
                {"names": names},
            ).one()
    finally:
        engine.dispose()
    return Snapshot(
        time.time(), cpu_by_part(dev, worker), machine_cpu(), int(dagster_bytes), int(transactions), int(sessions)
    )


# -- reading what happened ----------------------------------------------------------------------------------------


@dataclass
class Crawl:
    """One crawl_results materialization of a scheduled fire."""

    pipeline_id: int
    scheduled_for: datetime
    run_id: str
    at: float


def scheduled_crawls(home: CeleryHome, after: float) -> list[Crawl]:
    """Every crawl_results materialization since `after` of a scheduled fire: a batch member's says its fire in its
    metadata, a run of its own in its scheduled_for tag."""
    import dagster as dg

    from pipelines_dagster.crawl_metadata import CRAWL_RESULTS
    from pipelines_dagster.runs import SCHEDULED_FOR_TAG, pipeline_id_of_partition

    instance = home.instance
    records, cursor = [], None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=CRAWL_RESULTS, after_timestamp=after), limit=1000, cursor=cursor
        )
        records.extend(page.records)
        if not page.has_more:
            break
        cursor = page.cursor
    run_ids = sorted({record.run_id for record in records})
    tags = {
        record.dagster_run.run_id: record.dagster_run.tags
        for start in range(0, len(run_ids), 500)
        for record in instance.get_run_records(dg.RunsFilter(run_ids=run_ids[start : start + 500]))
    }
    crawls = []
    for record in records:
        entry = record.event_log_entry
        materialization = entry.asset_materialization
        assert materialization is not None and materialization.partition is not None
        metadata = materialization.metadata.get("scheduled_for")
        fired = metadata.value if metadata is not None else tags.get(record.run_id, {}).get(SCHEDULED_FOR_TAG)
        if fired is None:
            continue
        crawls.append(
            Crawl(
                pipeline_id=pipeline_id_of_partition(materialization.partition),
                scheduled_for=datetime.fromisoformat(str(fired)),
                run_id=record.run_id,
                at=entry.timestamp,
            )
        )
    return crawls


def run_records(home: CeleryHome, run_ids: Sequence[str]) -> dict[str, Any]:
    import dagster as dg

    ids = sorted(set(run_ids))
    return {
        record.dagster_run.run_id: record
        for start in range(0, len(ids), 500)
        for record in home.instance.get_run_records(dg.RunsFilter(run_ids=ids[start : start + 500]))
    }


def notifications(home: CeleryHome) -> dict[tuple[str, int], tuple[datetime, datetime | None]]:
    """(run id, pipeline id) -> (queued, delivered) of every run.* notification."""
    import sqlalchemy as sa

    from pipelines_dagster.app_db.models import NotificationDelivery

    with home.sessions() as session:
        rows = session.execute(
            sa.select(
                NotificationDelivery.dedupe_key, NotificationDelivery.created_at, NotificationDelivery.delivered_at
            ).where(NotificationDelivery.event_type.in_(RUN_EVENTS))
        ).all()
    found = {}
    for key, created, delivered in rows:
        _event, run_id, pipeline_id = key.rsplit(":", 2)
        found[(run_id, int(pipeline_id))] = (created, delivered)
    return found


def event_log_bytes(home: CeleryHome, run_ids: Sequence[str]) -> tuple[int, int]:
    """(rows, bytes) of the event log of these runs: each row's stored size, its event's JSON and columns."""
    import sqlalchemy as sa

    engine = sa.create_engine(home.dagster_url)
    try:
        with engine.connect() as conn:
            rows, size = conn.execute(
                sa.text(
                    "SELECT count(*), coalesce(sum(pg_column_size(e.*)), 0) FROM event_logs e WHERE run_id = ANY(:ids)"
                ),
                {"ids": list(run_ids)},
            ).one()
    finally:
        engine.dispose()
    return int(rows), int(size)


def ticks_of(dev: DagsterDev, sensor: str, *, after: float, before: float) -> list[Any]:
    return sorted(
        (tick for tick in dev.ticks(sensor, after=after) if tick.timestamp < before), key=lambda tick: tick.timestamp
    )


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))] if ordered else float("nan")


def describe_ticks(dev: DagsterDev, sensor: str, *, after: float, before: float) -> str:
    """A sensor's ticks over the window: how many, how long the longest took, the longest gap between two starts."""
    ticks = ticks_of(dev, sensor, after=after, before=before)
    if not ticks:
        return f"{sensor}: no tick"
    durations = [tick.end_timestamp - tick.timestamp for tick in ticks if tick.end_timestamp]
    gaps = [b.timestamp - a.timestamp for a, b in itertools.pairwise(ticks)]
    failed = [tick for tick in ticks if tick.error]
    reasons = sorted({_gist(tick.error) for tick in failed})
    return (
        f"{sensor}: {len(ticks)} ticks busy {sum(durations):.0f} s in all, p95 {percentile(durations, 0.95):.1f} s, "
        f"longest {max(durations, default=0):.1f} s, longest gap between starts {max(gaps, default=0):.1f} s"
        + (f", {len(failed)} FAILED: {' | '.join(reasons)[:600]}" if failed else "")
    )


def _gist(error: Any, *, depth: int = 2) -> str:
    """A tick's error in a line: its message's first line, and its cause's (Dagster wraps a timeout as unreachable)."""
    gist = error.message.strip().splitlines()[0][:200] if error.message.strip() else "?"
    cause = error.cause if depth > 1 else None
    return gist + (f" <- {_gist(cause, depth=depth - 1)}" if cause is not None else "")


def diagnose(home: CeleryHome, crawls: Sequence[Crawl], runs: dict[str, Any]) -> None:
    """Where a fire's time went (the schedule sensor's tick, then the queue, launcher and worker), and what the
    run-status sensor's work for one run costs: the run history read it makes for each pipeline of the run."""
    from pipelines_dagster.app_db.models import Pipeline
    from pipelines_dagster.history import RunHistory

    fired = {crawl.run_id: crawl.scheduled_for.timestamp() for crawl in crawls}
    created = [runs[run_id].create_timestamp.timestamp() - due for run_id, due in fired.items()]
    queued = [record.start_time - record.create_timestamp.timestamp() for record in runs.values() if record.start_time]
    members = [sum(crawl.run_id == run_id for crawl in crawls) for run_id in runs]
    average = len(crawls) / max(len(runs), 1)
    print(
        f"the window's {len(runs)} runs ({max(members, default=0)} pipelines at most, {average:.1f} on average): "
        f"created after the due time (schedule sensor) p95 {percentile(created, 0.95):.1f} s, max "
        f"{max(created, default=0):.1f} s; started after created (queue, launcher, broker, worker) p95 "
        f"{percentile(queued, 0.95):.1f} s, max {max(queued, default=0):.1f} s"
    )
    largest = max(runs, key=lambda run_id: sum(crawl.run_id == run_id for crawl in crawls), default=None)
    if largest is None:
        return
    own = [crawl for crawl in crawls if crawl.run_id == largest]
    with home.sessions() as session:
        workspaces = {crawl.pipeline_id: session.get_one(Pipeline, crawl.pipeline_id).workspace_id for crawl in own}
    history = RunHistory(home.instance, home.sessions, ui_base_url=None)
    started = time.perf_counter()
    for crawl in own:
        history.get_run(workspaces[crawl.pipeline_id], largest, pipeline_id=crawl.pipeline_id)
    seconds = time.perf_counter() - started
    print(
        f"the run-status sensor's history read for each pipeline of a run (history.get_run), here, for the run of "
        f"{len(own)}: {seconds:.2f} s, {seconds / len(own) * 1000:.0f} ms a pipeline"
    )


# -- the measurement ----------------------------------------------------------------------------------------------


def measure(pipelines: int, minutes: float, *, smoke: bool, concurrency: int = CONCURRENCY) -> list[Figure]:
    """Seed `pipelines` hourly pipelines on the Celery profile, measure `minutes` of steady state and return the
    figures, each judged against its target (smoke: only that every fire due was crawled and notified)."""
    if not 0 < minutes <= 60:
        raise SystemExit(f"measure {minutes} minutes: give more than 0 and at most 60 (the pipelines are hourly)")
    if pipelines < 1:
        raise SystemExit(f"{pipelines} pipelines: give at least 1")
    import psutil

    with ExitStack() as stack:
        _server, urls = stack.enter_context(served_corpus(pages=min(PAGES, pipelines), min_bytes=PAGE_BYTES, seed=SEED))
        receiver = stack.enter_context(Receiver(paths=RECEIVER_PATHS))
        home = stack.enter_context(CeleryHome(pool_processes=concurrency))
        dev = DagsterDev(
            home,  # type: ignore[arg-type]  # what DagsterDev reads of an EmbeddedHome, on the Celery profile
            workspace_yaml="load_from:\n" + OUR_LOCATION_YAML,
            locations=(OUR_LOCATION,),
            sensors=SENSORS,
        )
        stack.callback(dev.stop)
        dev.start()
        worker = stack.enter_context(celery_worker(home, concurrency=concurrency))
        print(
            f"Celery profile: dagster dev (DAGSTER_HOME {dev.home}), one worker of {concurrency} pool processes on "
            f"queue {home.queue}; PostgreSQL databases {home.dagster_url.rsplit('/', 1)[1]} and "
            f"{home.app_url.rsplit('/', 1)[1]}; {len(urls)} pages of {PAGE_BYTES // KiB} KiB on loopback; "
            f"load {os.getloadavg()[0]:.1f} on {psutil.cpu_count()} cores",
            flush=True,
        )
        # Smoke: every pipeline due at the window's first minute, with no warm-up minute (it proves the bench works,
        # in CI); else their minutes spread evenly over the hour, measured after a minute of load.
        # What seeding takes (10,000 pipelines: 21 s on a loaded machine; 20: 1.2 s), and some: the wait for the
        # window's minute is this and up to a minute more, so a smoke run waits 10-70 s.
        estimate = 10 + pipelines * 0.005
        warm_up = next_minute(datetime.now(UTC) + timedelta(seconds=estimate))
        spread = 1 if smoke else 60
        plan = Plan(
            pipelines=pipelines,
            window_start=warm_up if smoke else warm_up + timedelta(minutes=1),
            window_seconds=minutes * 60,
            first_minute=warm_up.minute if smoke else 0,
            spread=spread,
        )
        _pipeline_ids, seconds = seed(home, receiver, urls, plan)
        print(
            f"seeded {pipelines:,} pipelines in {len(range(0, pipelines, PIPELINES_PER_WORKSPACE))} workspaces in "
            f"{seconds:.1f} s",
            flush=True,
        )
        if datetime.now(UTC) >= plan.window_start - timedelta(seconds=5):
            plan = Plan(**{**plan.__dict__, "window_start": next_minute(datetime.now(UTC) + timedelta(seconds=5))})
        start = plan.window_start.timestamp()
        end = start + plan.window_seconds
        due = plan.fires_due()
        print(
            f"warm-up until {plan.window_start:%H:%M:%S} UTC, then {minutes:g} minutes: {due:,} fires due", flush=True
        )
        names = [home.dagster_url.rsplit("/", 1)[1], home.app_url.rsplit("/", 1)[1]]
        with ConnectionSampler(dev, worker, names, interval=0.5) as connections:
            time.sleep(max(0.0, start - time.time()))
            before = snapshot(home, dev, worker)
            time.sleep(max(0.0, end - time.time()))
            after = snapshot(home, dev, worker)
            print(f"window over at {datetime.now(UTC):%H:%M:%S} UTC; waiting for its last fires", flush=True)
            window_due = set(plan.due_times())

            def in_window(crawls: list[Crawl]) -> list[Crawl]:
                return [crawl for crawl in crawls if crawl.scheduled_for in window_due]

            drain_until = time.time() + DRAIN_SECONDS
            crawls = in_window(scheduled_crawls(home, start - 60))
            while len({(c.pipeline_id, c.scheduled_for) for c in crawls}) < due and time.time() < drain_until:
                time.sleep(2)
                crawls = in_window(scheduled_crawls(home, start - 60))
            runs = run_records(home, [crawl.run_id for crawl in crawls])
            while time.time() < drain_until and not all(record.dagster_run.is_finished for record in runs.values()):
                time.sleep(2)
                runs = run_records(home, list(runs))
            # Every member of each ended run owes a notification; wait for them to be delivered.
            wanted = {(crawl.run_id, crawl.pipeline_id) for crawl in crawls}
            while time.time() < drain_until:
                found = notifications(home)
                if all(key in found and found[key][1] is not None for key in wanted):
                    break
                time.sleep(2)
            found = notifications(home)
        machine_load = os.getloadavg()
        window = plan.window_seconds
        crawled = {(crawl.pipeline_id, crawl.scheduled_for) for crawl in crawls}
        in_span = [crawl for crawl in scheduled_crawls(home, before.at) if crawl.at < after.at]
        print(describe_ticks(dev, "pipeline_schedules", after=start, before=end))
        print(describe_ticks(dev, "notify_success_runs", after=start, before=end + 60))
        print(describe_ticks(dev, "notification_sender", after=start, before=end + 60))
        diagnose(home, crawls, runs)
        rows, event_bytes = event_log_bytes(home, list(runs))

    return figures(
        plan=plan,
        due=due,
        crawls=crawls,
        crawled=crawled,
        runs=runs,
        found=found,
        in_span=len(in_span),
        before=before,
        after=after,
        connections=connections,
        event_rows=rows,
        event_bytes=event_bytes,
        concurrency=concurrency,
        smoke=smoke,
        load=machine_load,
        window=window,
    )


def figures(
    *,
    plan: Plan,
    due: int,
    crawls: list[Crawl],
    crawled: set[tuple[int, datetime]],
    runs: dict[str, Any],
    found: dict[tuple[str, int], tuple[datetime, datetime | None]],
    in_span: int,
    before: Snapshot,
    after: Snapshot,
    connections: ConnectionSampler,
    event_rows: int,
    event_bytes: int,
    concurrency: int,
    smoke: bool,
    load: tuple[float, float, float],
    window: float,
) -> list[Figure]:
    """The figures of one measurement, each judged (smoke: only completeness)."""
    judged = not smoke
    result: list[Figure] = []

    def add(label: str, value: float, unit: str, target: str | None = None, ok: bool = True, *, always: bool = False):
        result.append(Figure(label, value, unit, target, ok if (judged or always) else True))

    def utc(epoch: float) -> datetime:
        return datetime.fromtimestamp(epoch, UTC)

    add(
        f"(d) fires due in {window / 60:g} min vs pipelines crawled for them",
        len(crawled),
        f"of {due:,} crawled",
        f"= {due:,}",
        len(crawled) == due,
        always=True,
    )
    starts = [
        (utc(runs[crawl.run_id].start_time) - crawl.scheduled_for).total_seconds()
        for crawl in crawls
        if runs[crawl.run_id].start_time
    ]
    done = [(utc(crawl.at) - crawl.scheduled_for).total_seconds() for crawl in crawls]
    never = due - len(crawled)
    add(
        "(d) largest lag of a fire's run start behind its due time" + (f" ({never} fires never ran)" if never else ""),
        max(starts, default=float("inf")) if not never else float("inf"),
        "s",
        f"<= {FIRE_LAG_TARGET:g} s",
        bool(starts) and not never and max(starts) <= FIRE_LAG_TARGET,
    )
    add("(d) fire lag to run start, p50", percentile(starts, 0.5), "s")
    add("(d) fire lag to its crawl materialized, p95", percentile(done, 0.95), "s")
    add("(d) fire lag to its crawl materialized, max", max(done, default=float("nan")), "s")

    queued, delivered, missing = [], [], 0
    for crawl in crawls:
        record = runs[crawl.run_id]
        if not record.end_time:
            missing += 1
            continue
        notice = found.get((crawl.run_id, crawl.pipeline_id))
        if notice is None:
            missing += 1
            continue
        ended = utc(record.end_time)
        queued.append((notice[0] - ended).total_seconds())
        if notice[1] is not None:
            delivered.append((notice[1] - ended).total_seconds())
    add(
        "(4) notification lag, run end -> queued, max" + (f" ({missing} crawls not notified)" if missing else ""),
        max(queued, default=float("inf")),
        "s",
        f"<= {NOTIFY_LAG_TARGET:g} s, each crawl notified",
        not missing and bool(queued) and max(queued) <= NOTIFY_LAG_TARGET,
    )
    if smoke and missing:
        result[-1] = Figure(result[-1].label, result[-1].value, "s", result[-1].target, False)
    add("(4) notification lag, run end -> queued, p50", percentile(queued, 0.5), "s")
    add("(4) notification lag, run end -> queued, p95", percentile(queued, 0.95), "s")
    add("(4) notification lag, run end -> delivered, p95", percentile(delivered, 0.95), "s")
    add("(4) notification lag, run end -> delivered, max", max(delivered, default=float("nan")), "s")

    limit = connections.max_connections
    by_part = ", ".join(f"{part} {count}" for part, count in sorted(connections.peak_by_part.items()))
    add(
        f"(4) peak PostgreSQL connections of the deployment ({by_part}; server-wide peak {connections.peak_server})",
        connections.peak,
        f"of max_connections {limit}",
        f"<= {CONNECTIONS_SHARE_TARGET:.0%} = {int(limit * CONNECTIONS_SHARE_TARGET)}",
        connections.peak <= limit * CONNECTIONS_SHARE_TARGET,
    )

    crawls_per_day = plan.pipelines * 24
    per_crawl = event_bytes / len(crawls) if crawls else float("nan")
    grown = (after.dagster_bytes - before.dagster_bytes) / in_span if in_span else float("nan")
    add(f"(4) event-log bytes per crawl ({event_rows / max(len(crawls), 1):.0f} rows)", per_crawl, "bytes")
    add("(4) Dagster database growth per crawl (tables and indexes)", grown, "bytes")
    add(f"(4) Dagster database growth at {crawls_per_day:,} crawls a day", grown * crawls_per_day / 1e9, "GB/day")

    cpu = {part: after.cpu.get(part, 0.0) - before.cpu.get(part, 0.0) for part in after.cpu}
    span = after.at - before.at
    ours = sum(cpu.values())
    others = max(0.0, (after.machine - before.machine) - ours) / (span * (os.cpu_count() or 1))
    per_crawl_cpu = {part: seconds / in_span for part, seconds in cpu.items()} if in_span else {}
    print(
        f"CPU over the window ({span:.0f} s, {in_span} crawls): "
        + ", ".join(f"{part} {seconds:.1f} s ({seconds / span:.0%} of a core)" for part, seconds in sorted(cpu.items()))
        + f"; the rest of the machine {others:.0%} busy; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    for part, seconds in sorted(per_crawl_cpu.items()):
        add(f"CPU per crawl: {part}", seconds, "CPU-s")
    wall = [
        (record.end_time - record.start_time, len({c.pipeline_id for c in crawls if c.run_id == run_id}))
        for run_id, record in runs.items()
        if record.start_time and record.end_time
    ]
    wall_per_crawl = sum(seconds for seconds, _ in wall) / max(1, sum(members for _, members in wall))
    add("pool-process seconds per crawl (run wall time / its crawls)", wall_per_crawl, "s")
    transactions = (after.transactions - before.transactions) / in_span if in_span else float("nan")
    add("PostgreSQL transactions per crawl (both databases)", transactions, "xacts")
    # Dagster's PostgreSQL storage holds no pool outside the webserver: each of its calls opens a connection, a
    # backend process forked by the server.
    opened = (after.sessions - before.sessions) / in_span if in_span else float("nan")
    add("PostgreSQL connections opened per crawl (both databases)", opened, "sessions")
    result.extend(sizing(per_crawl_cpu, wall_per_crawl, transactions, opened, grown, connections, concurrency))
    return result


def sizing(
    per_crawl_cpu: dict[str, float],
    wall_per_crawl: float,
    transactions: float,
    opened: float,
    grown: float,
    connections: ConnectionSampler,
    concurrency: int,
) -> list[Figure]:
    """What SIZING_PIPELINES hourly pipelines need, from the measured cost per crawl, each part kept under HEADROOM."""
    rate = SIZING_PIPELINES / 3600
    worker_cores = per_crawl_cpu.get("worker", 0.0) * rate / HEADROOM
    pool = math.ceil(wall_per_crawl * rate / HEADROOM)
    daemon = per_crawl_cpu.get("daemon", 0.0) * rate
    code_server = per_crawl_cpu.get("code server", 0.0) * rate
    shared = sum(seconds for part, seconds in per_crawl_cpu.items() if part != "worker") * rate / HEADROOM
    worker_connections = connections.peak_by_part.get("worker", 0) / max(concurrency, 1)
    fixed = sum(count for part, count in connections.peak_by_part.items() if part != "worker")
    label = f"at {SIZING_PIPELINES:,} hourly pipelines ({rate:.1f} crawls/s, parts at most {HEADROOM:.0%} busy)"
    return [
        Figure(f"{label}: worker pool processes", pool, "processes"),
        Figure(f"{label}: worker cores", worker_cores, "cores"),
        Figure(f"{label}: daemon + code server + webserver cores", shared, "cores"),
        Figure(f"{label}: the daemon's own load (one process)", daemon, "cores"),
        Figure(f"{label}: the code server's load (sensors)", code_server, "cores"),
        Figure(
            f"{label}: PostgreSQL connections ({worker_connections:.1f} per pool process + {fixed} for the rest)",
            math.ceil(worker_connections * pool + fixed),
            "connections",
        ),
        Figure(f"{label}: PostgreSQL transactions", transactions * rate, "xacts/s"),
        Figure(f"{label}: PostgreSQL connections opened", opened * rate, "sessions/s"),
        Figure(f"{label}: Dagster database growth", grown * SIZING_PIPELINES * 24 / 1e9, "GB/day"),
    ]


def report(figures: Sequence[Figure]) -> bool:
    """Print the figures; True when every judged one met its target."""
    for figure in figures:
        print(figure)
    missed = [figure.label for figure in figures if not figure.ok]
    print("FAIL: " + "; ".join(missed) if missed else "PASS")
    return not missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", type=int, default=10_000, help="hourly pipelines")
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes of steady state measured")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="the worker's pool processes")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({SMOKE_PIPELINES} pipelines due within {SMOKE_MINUTES:g} minutes) that proves the bench "
        "works: exit 1 only when a fire due was not crawled or a crawl not notified, whatever the lags",
    )
    args = parser.parse_args()
    if args.smoke:
        args.pipelines, args.minutes = SMOKE_PIPELINES, SMOKE_MINUTES
    began = datetime.now(UTC)
    print(f"started {began:%Y-%m-%d %H:%M:%S} UTC on {socket.gethostname()}, load {os.getloadavg()[0]:.1f}")
    result = measure(args.pipelines, args.minutes, smoke=args.smoke, concurrency=args.concurrency)
    if args.smoke:
        print("targets not judged (smoke), only that every fire due was crawled and notified")
    return 0 if report(result) else 1


if __name__ == "__main__":
    sys.exit(main())
