"""The Celery profile end to end: `dagster dev` on deploy/dagster.celery.yaml (PostgreSQL storage, runs sent
through RabbitMQ, task states in Redis, blobs in the S3 server) and two `pipelines-dagster worker`s, each in a
directory of its own as if on two machines: "solo" (one pool process, on the default queue and a queue of its
own) and "duo" (two pool processes, on the default queue).

In order: runs routed to solo's queue run there, in its one warm pool process; 20 pipelines spread over both
workers under one per-host budget; a killed pool process fails its run, which is retried once and charged once;
a whole worker killed is noticed within a minute, its run failed and retried on the other, which keeps going."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import dagster as dg
import psutil
import pytest
import redis
import sqlalchemy as sa
import yaml

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.core.storage.locks import DatabaseLocks, connector_lock_name, pipeline_lock_name
from pipelines_dagster.crawl_metadata import latest_crawl
from pipelines_dagster.launch import GraphQLLauncher, launch_pipeline_run
from tests.conftest import database_beside
from tests.support import ledger
from tests.support.dagster_dev import BIN, REPO_DIR, Dev, Seeded, dagster_dev, seed, wait_for
from tests.support.processes import stop_group
from tests.support.tcp_proxy import TcpProxy
from tests.test_e2e_launch_paths import documents

pytestmark = pytest.mark.integration

TASK_ID_TAG = "dagster-celery/task_id"
WORKER_READY_SECONDS = 60
RUN_WITHIN_SECONDS = 90
SPREAD_PIPELINES = 20
POOL_PROCESSES = 3
# The crawler's default: requests at a time to one host, across every run on every worker (the shared budget).
PER_HOST_CONCURRENCY = 4
# Slow pages, so a run is still crawling when it is killed.
SLOW_PAGE_SECONDS = 6
# Run monitoring polls every 5 s; the launcher counts a worker gone after 15 s without a ping's answer.
FAILED_WITHIN_SECONDS = 60
# As long as a broker restart takes: longer than the daemon's health checks take to poll twice.
BROKER_DOWN_SECONDS = 15
RETRIED_WITHIN_SECONDS = 120


@dataclass
class Worker:
    name: str
    process: subprocess.Popen
    log: Path

    @property
    def node(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def pool(self) -> set[int]:
        return {child.pid for child in psutil.Process(self.process.pid).children()}

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@dataclass
class CeleryDeployment:
    dev: Dev
    workers: dict[str, Worker]
    queue: str
    solo_queue: str
    broker: TcpProxy
    """Every process reaches the broker through it: cut, the broker is down as a restart takes it down."""

    def run_log(self, run_id: str) -> str:
        """What the run's event log says of it (its engine events name a failed launch or health check)."""
        return "\n".join(entry.message for entry in self.dev.instance.all_logs(run_id))[-3000:]

    def logs(self) -> str:
        return "\n".join([self.dev.log_tail(), *(worker.log_tail() for worker in self.workers.values())])

    def run_now(self, pipeline: Seeded) -> str:
        return launch_pipeline_run(
            self.dev.sessions,
            workspace_id=pipeline.workspace_id,
            pipeline_id=pipeline.pipeline_id,
            launcher=GraphQLLauncher(self.dev.ui_url),
        )

    def ended(self, run_id: str, timeout: float = RUN_WITHIN_SECONDS) -> dg.DagsterRun:
        return wait_for(f"run {run_id} to end", lambda: self.dev.ended(run_id), timeout=timeout)

    def worker_of(self, run: dg.DagsterRun) -> str | None:
        """The worker the run's Celery task ran on, as the result backend (Redis, extended results) records it."""
        return self.dev.instance.run_launcher.celery.AsyncResult(run.tags[TASK_ID_TAG]).worker


def _celery_config(directory: Path, queue: str) -> Path:
    """deploy/dagster.celery.yaml with runs sent to `queue` and task states kept under its name in Redis: the
    broker and Redis are shared with other test sessions, whose workers must not take these runs."""
    config = yaml.safe_load((REPO_DIR / "deploy" / "dagster.celery.yaml").read_text())
    launcher = config["run_launcher"]["config"]
    launcher["default_queue"] = queue
    launcher["config_source"]["result_backend_transport_options"] = {"global_keyprefix": f"{queue}:"}
    # As many runs at once as the workers' pool processes: solo's one and duo's two.
    config["concurrency"]["runs"]["max_concurrent_runs"] = POOL_PROCESSES
    path = directory / "dagster.celery.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _start_worker(dev: Dev, directory: Path, name: str, *, concurrency: int, queues: list[str]) -> Worker:
    """`pipelines-dagster worker` run from a directory of its own (its data dir too), once Celery says it is
    ready; fail with its log if it does not get there."""
    directory.mkdir()
    log = directory / "worker.log"
    queue_options = [option for queue in queues for option in ("--queue", queue)]
    process = subprocess.Popen(
        [str(BIN / "pipelines-dagster"), "worker", "--name", name, "--concurrency", str(concurrency), *queue_options],
        cwd=directory,
        env={
            **dev.env,
            "PIPELINES_DATA_DIR": str(directory / "data"),
            # Its machine's extraction slots: one per core of its own, not shared with the other worker's.
            "PIPELINES_EXTRACTION_SLOTS_DIR": str(directory / "extraction-slots"),
        },
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = Worker(name=name, process=process, log=log)
    deadline = time.monotonic() + WORKER_READY_SECONDS
    while b" ready." not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_group(process)
            pytest.fail(f"worker {name} did not get ready:\n{worker.log_tail()}", pytrace=False)
        time.sleep(0.2)
    return worker


@pytest.fixture(scope="module")
def celery(postgres_url, broker_url, redis_url, s3_endpoint_url, tmp_path_factory) -> Iterator[CeleryDeployment]:
    directory = tmp_path_factory.mktemp("celery")
    queue = f"pipelines-e2e-{uuid.uuid4().hex[:8]}"
    solo_queue = f"{queue}-solo"
    bucket = f"pd-celery-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint_url).create_bucket(Bucket=bucket)
    broker = urlsplit(broker_url)
    with (
        database_beside(postgres_url, "dagster") as dagster_url,
        database_beside(postgres_url, "app") as app_url,
        TcpProxy((broker.hostname or "127.0.0.1", broker.port or 5672)) as proxy,
    ):
        extra_env = {
            "DAGSTER_PG_URL": dagster_url,
            "PIPELINES_DATABASE_URL": app_url,
            "PIPELINES_CELERY_BROKER_URL": broker._replace(
                netloc=f"{broker.username}:{broker.password}@127.0.0.1:{proxy.port}"
            ).geturl(),
            "PIPELINES_CELERY_BACKEND_URL": redis_url,
            # Shared by both workers, as by two machines: blobs in S3, locks and the per-host budget in PostgreSQL.
            "PIPELINES_BLOB_STORE": f"s3://{bucket}/raw",
            "PIPELINES_S3_ENDPOINT_URL": s3_endpoint_url,
            "PIPELINES_CRAWLER_SHARED_HOST_BUDGET": "true",
            **{name: os.environ[name] for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")},
        }
        config = _celery_config(directory, queue)
        with dagster_dev(directory, instance_config=config, extra_env=extra_env) as dev:
            workers: dict[str, Worker] = {}
            try:
                workers["solo"] = _start_worker(
                    dev, directory / "solo", "solo", concurrency=1, queues=[queue, solo_queue]
                )
                workers["duo"] = _start_worker(dev, directory / "duo", "duo", concurrency=2, queues=[queue])
                yield CeleryDeployment(dev=dev, workers=workers, queue=queue, solo_queue=solo_queue, broker=proxy)
            finally:
                proxy.restore()
                for worker in workers.values():
                    stop_group(worker.process)
                # What the runs left on the shared broker and Redis: the queues, and the task states.
                app = dev.instance.run_launcher.celery
                with app.connection_for_write() as connection:
                    for name in (queue, solo_queue):
                        connection.default_channel.queue_delete(name)
                client = redis.Redis.from_url(redis_url)
                for key in client.scan_iter(f"{queue}:*"):
                    client.delete(key)
                client.close()


def _route(dev: Dev, pipeline: Seeded, queue: str) -> None:
    with dev.sessions() as session, session.begin():
        session.execute(sa.update(Pipeline).where(Pipeline.id == pipeline.pipeline_id).values(worker_queue=queue))


def _no_lock_left(dev: Dev, pipeline_ids: list[int]) -> list[str]:
    locks = DatabaseLocks(dev.engine)
    with dev.sessions() as session:
        connectors = dict(session.execute(sa.select(Pipeline.id, Pipeline.connector_id)).all())
    names = [pipeline_lock_name(pid) for pid in pipeline_ids] + [
        connector_lock_name(connectors[pid]) for pid in pipeline_ids
    ]
    return [name for name in names if locks.owner_of(name) is not None]


def test_runs_of_a_pipeline_routed_to_a_queue_run_on_its_worker_in_one_warm_pool_process(celery: CeleryDeployment):
    dev = celery.dev
    seeded = [seed(dev, name) for name in ("celeryone", "celerytwo")]
    for pipeline in seeded:
        _route(dev, pipeline, celery.solo_queue)
    solo = celery.workers["solo"]
    runs, kept = [], []
    for pipeline in seeded:
        runs.append(celery.ended(celery.run_now(pipeline)))
        kept.append(_storage_connections(dev, solo))
    for run, pipeline in zip(runs, seeded, strict=True):
        assert run.status == dg.DagsterRunStatus.SUCCESS, celery.logs()
        # Sent to the pipeline's queue at a manual run's priority (RabbitMQ: the highest first).
        assert (run.tags["dagster-celery/queue"], run.tags["dagster-celery/run_priority"]) == (celery.solo_queue, "9")
        assert celery.worker_of(run) == solo.node
        assert latest_crawl(dev.instance, pipeline.partition_key).metadata.worker == solo.node
        assert sorted(documents(dev, pipeline.pipeline_id)) == sorted(pipeline.urls)
        assert ledger.charges(dev.sessions, pipeline.workspace_id) == [f"crawl:{run.run_id}:{pipeline.pipeline_id}"]
    # Both runs executed in solo's one pool process: no process was started for either.
    pids = {dev.run_pid(run.run_id) for run in runs}
    assert len(pids) == 1 and pids <= solo.pool(), (pids, solo.pool())
    # On one Dagster instance, whose connections to Dagster's storage outlived the first run and served the second.
    assert kept[0] and kept[0] & kept[1], kept


def _storage_connections(dev: Dev, worker: Worker) -> set[int]:
    """The client ports of the worker's pool processes' open connections to Dagster's storage database."""
    ports = {
        connection.laddr.port
        for pid in worker.pool()
        for connection in psutil.Process(pid).net_connections(kind="tcp")
        if connection.raddr and connection.status == psutil.CONN_ESTABLISHED
    }
    engine = sa.create_engine(dev.env["DAGSTER_PG_URL"], poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        storage = set(
            connection.execute(
                sa.text("SELECT client_port FROM pg_stat_activity WHERE datname = current_database()")
            ).scalars()
        )
    engine.dispose()
    return ports & storage


def test_twenty_pipelines_spread_over_both_workers_under_one_per_host_budget(celery: CeleryDeployment):
    dev = celery.dev
    before = dev.site.max_in_flight
    seeded = [seed(dev, f"spread{n}", pages=2, delay=0.3) for n in range(SPREAD_PIPELINES)]
    run_ids = [celery.run_now(pipeline) for pipeline in seeded]
    runs = [celery.ended(run_id, timeout=RUN_WITHIN_SECONDS * 2) for run_id in run_ids]

    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS] * SPREAD_PIPELINES, celery.logs()
    ran_on = [latest_crawl(dev.instance, pipeline.partition_key).metadata.worker for pipeline in seeded]
    assert set(ran_on) == {worker.node for worker in celery.workers.values()}, ran_on
    assert ran_on == [celery.worker_of(run) for run in runs]
    charges = [ledger.charges(dev.sessions, pipeline.workspace_id) for pipeline in seeded]
    assert charges == [
        [f"crawl:{run.run_id}:{pipeline.pipeline_id}"] for run, pipeline in zip(runs, seeded, strict=True)
    ]
    # Up to three runs crawled the one loopback host at a time, on two machines: never more than its budget.
    assert max(before, dev.site.max_in_flight) <= PER_HOST_CONCURRENCY
    assert _no_lock_left(dev, [pipeline.pipeline_id for pipeline in seeded]) == []


def _crawling(celery: CeleryDeployment, pipeline: Seeded, run_id: str) -> tuple[str, int] | None:
    """(its worker, its pool process) once the run's crawl has asked the site for a page."""
    if not celery.dev.site.hits(urlsplit(pipeline.urls[0]).path):
        return None
    run = celery.dev.instance.get_run_by_id(run_id)
    worker = celery.worker_of(run) if run is not None and TASK_ID_TAG in run.tags else None
    pid = celery.dev.run_pid(run_id)
    return (worker, pid) if worker and pid else None


def _retry_of(dev: Dev, run_id: str) -> dg.DagsterRun | None:
    retries = dev.instance.get_runs(dg.RunsFilter(tags={"dagster/parent_run_id": run_id}))
    return retries[0] if retries and retries[0].is_finished else None


def _failed_and_retried_once(celery: CeleryDeployment, pipeline: Seeded, run_id: str) -> tuple[dg.DagsterRun, float]:
    """The run's retry, once the run failed and its one retry ended; and when the run was seen failed."""
    dev = celery.dev
    run = dev.failed(run_id, timeout=FAILED_WITHIN_SECONDS)
    failed_at = time.monotonic()
    assert run.tags["dagster/will_retry"] == "true", run.tags
    retry = wait_for("the retry to end", lambda: _retry_of(dev, run_id), timeout=RETRIED_WITHIN_SECONDS, every=0.5)
    assert retry.status == dg.DagsterRunStatus.SUCCESS, celery.logs()
    assert (retry.root_run_id, retry.tags["dagster/retry_number"]) == (run_id, "1")
    assert {r.run_id for r in dev.instance.get_runs(dg.RunsFilter(tags={"dagster/root_run_id": run_id}))} == {
        retry.run_id
    }
    # Charged once, under the root run, by the retry that finished the crawl.
    assert ledger.charges(dev.sessions, pipeline.workspace_id) == [f"crawl:{run_id}:{pipeline.pipeline_id}"]
    assert sorted(documents(dev, pipeline.pipeline_id)) == sorted(pipeline.urls)
    assert _no_lock_left(dev, [pipeline.pipeline_id]) == []
    return retry, failed_at


def test_a_killed_pool_process_fails_its_run_which_is_retried_once_and_charged_once(celery: CeleryDeployment):
    dev = celery.dev
    pipeline = seed(dev, "poolkill", pages=2, delay=SLOW_PAGE_SECONDS)
    run_id = celery.run_now(pipeline)
    worker, pid = wait_for("the run to be crawling", lambda: _crawling(celery, pipeline, run_id), timeout=90)
    owner = next(w for w in celery.workers.values() if w.node == worker)
    assert pid in owner.pool()
    os.kill(pid, signal.SIGKILL)

    retry, _ = _failed_and_retried_once(celery, pipeline, run_id)
    # The worker replaced its pool process and goes on: both workers still answer.
    assert all(w.process.poll() is None for w in celery.workers.values())
    assert celery.worker_of(retry) in {w.node for w in celery.workers.values()}


def test_the_broker_down_a_while_loses_no_run(celery: CeleryDeployment):
    dev = celery.dev
    running = seed(dev, "brokerrunning", pages=2, delay=SLOW_PAGE_SECONDS)
    running_id = celery.run_now(running)
    wait_for("the run to be crawling", lambda: _crawling(celery, running, running_id), timeout=90)
    celery.broker.cut()
    cut_at = time.monotonic()
    # A run started while the broker is down: the daemon takes it from Dagster's queue and waits to send it.
    waiting = seed(dev, "brokerwaiting")
    waiting_id = celery.run_now(waiting)
    wait_for("the broker's outage to pass", lambda: time.monotonic() - cut_at >= BROKER_DOWN_SECONDS, timeout=60)
    celery.broker.restore()

    for run_id, pipeline in ((running_id, running), (waiting_id, waiting)):
        run = celery.ended(run_id, timeout=RUN_WITHIN_SECONDS * 2)
        assert run.status == dg.DagsterRunStatus.SUCCESS, celery.run_log(run_id)
        # Neither failed nor ran twice: the one run, its one charge.
        assert not dev.instance.get_runs(dg.RunsFilter(tags={"dagster/parent_run_id": run_id}))
        assert ledger.charges(dev.sessions, pipeline.workspace_id) == [f"crawl:{run_id}:{pipeline.pipeline_id}"]
    # Both workers reconnected and take runs again.
    assert all(w.process.poll() is None for w in celery.workers.values())


def test_a_whole_worker_killed_is_noticed_and_its_run_retried_on_the_other_which_keeps_going(
    celery: CeleryDeployment,
):
    dev = celery.dev
    pipeline = seed(dev, "workerkill", pages=2, delay=SLOW_PAGE_SECONDS)
    run_id = celery.run_now(pipeline)
    worker, _ = wait_for("the run to be crawling", lambda: _crawling(celery, pipeline, run_id), timeout=90)
    [(killed_name, killed)] = [(name, w) for name, w in celery.workers.items() if w.node == worker]
    [survivor] = [w for w in celery.workers.values() if w is not killed]
    # The machine gone: the worker and every pool process at once, with no word to the broker or the backend.
    os.killpg(killed.process.pid, signal.SIGKILL)
    killed.process.wait()
    killed_at = time.monotonic()
    # The other worker keeps going meanwhile.
    other = seed(dev, "survivor")
    other_run = celery.ended(celery.run_now(other))
    assert other_run.status == dg.DagsterRunStatus.SUCCESS, celery.logs()
    assert celery.worker_of(other_run) == survivor.node

    retry, failed_at = _failed_and_retried_once(celery, pipeline, run_id)
    assert failed_at - killed_at <= FAILED_WITHIN_SECONDS
    assert celery.worker_of(retry) == survivor.node
    # Run monitoring failed it on the launcher's word that its worker stopped answering.
    said = [entry.message for entry in dev.instance.all_logs(run_id) if "has not answered a ping" in entry.message]
    assert said and killed.node in said[0], [entry.message for entry in dev.instance.all_logs(run_id)][-5:]
    print(f"\nworker {killed_name} killed whole: its run seen FAILURE {failed_at - killed_at:.1f} s after")
