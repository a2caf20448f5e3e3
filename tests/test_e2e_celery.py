"""The Celery profile end to end: `dagster dev` on deploy/dagster.celery.yaml (PostgreSQL storage, runs sent
through RabbitMQ, task states in Redis) and one `pipelines-dagster worker`, whose one pool process executes two
run-nows over a loopback site, one after the other, without a process started for either."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import psutil
import pytest
import redis
import yaml

from pipelines_dagster.launch import GraphQLLauncher, launch_pipeline_run
from tests.conftest import database_beside
from tests.support import ledger
from tests.support.dagster_dev import BIN, REPO_DIR, Dev, dagster_dev, seed, wait_for
from tests.support.processes import stop_group
from tests.test_e2e_launch_paths import documents

pytestmark = pytest.mark.integration

WORKER_NAME = "e2e"
TASK_ID_TAG = "dagster-celery/task_id"
WORKER_READY_SECONDS = 60
RUN_WITHIN_SECONDS = 90


@dataclass
class CeleryDeployment:
    dev: Dev
    worker: subprocess.Popen
    worker_log: Path
    queue: str

    def worker_log_tail(self) -> str:
        return self.worker_log.read_text(errors="replace")[-3000:]


def _celery_config(directory: Path, queue: str) -> Path:
    """deploy/dagster.celery.yaml with runs sent to `queue` and task states kept under its name in Redis: the
    broker and Redis are shared with other test sessions, whose workers must not take these runs."""
    config = yaml.safe_load((REPO_DIR / "deploy" / "dagster.celery.yaml").read_text())
    launcher = config["run_launcher"]["config"]
    launcher["default_queue"] = queue
    launcher["config_source"]["result_backend_transport_options"] = {"global_keyprefix": f"{queue}:"}
    path = directory / "dagster.celery.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _start_worker(dev: Dev, directory: Path) -> tuple[subprocess.Popen, Path]:
    """`pipelines-dagster worker` with one pool process, run from a directory of its own, once Celery says it is
    ready; fail with its log if it does not get there."""
    log = directory / "worker.log"
    process = subprocess.Popen(
        [str(BIN / "pipelines-dagster"), "worker", "--name", WORKER_NAME, "--concurrency", "1"],
        cwd=directory,
        env=dev.env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + WORKER_READY_SECONDS
    while b" ready." not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_group(process)
            pytest.fail(f"the worker did not get ready:\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
        time.sleep(0.2)
    return process, log


@pytest.fixture(scope="module")
def celery(postgres_url, broker_url, redis_url, tmp_path_factory) -> Iterator[CeleryDeployment]:
    directory = tmp_path_factory.mktemp("celery")
    queue = f"pipelines-e2e-{uuid.uuid4().hex[:8]}"
    worker_dir = directory / "worker"
    worker_dir.mkdir()
    with (
        database_beside(postgres_url, "dagster") as dagster_url,
        database_beside(postgres_url, "app") as app_url,
    ):
        extra_env = {
            "DAGSTER_PG_URL": dagster_url,
            "PIPELINES_DATABASE_URL": app_url,
            "PIPELINES_CELERY_BROKER_URL": broker_url,
            "PIPELINES_CELERY_BACKEND_URL": redis_url,
        }
        config = _celery_config(directory, queue)
        with dagster_dev(directory, instance_config=config, extra_env=extra_env) as dev:
            worker, log = _start_worker(dev, worker_dir)
            try:
                yield CeleryDeployment(dev=dev, worker=worker, worker_log=log, queue=queue)
            finally:
                stop_group(worker)
                # What the runs left on the shared broker and Redis: the queue, and the task states.
                app = dev.instance.run_launcher.celery
                with app.connection_for_write() as connection:
                    connection.default_channel.queue_delete(queue)
                client = redis.Redis.from_url(redis_url)
                for key in client.scan_iter(f"{queue}:*"):
                    client.delete(key)
                client.close()


def test_run_nows_run_on_the_celery_worker_in_one_warm_pool_process(celery: CeleryDeployment):
    dev = celery.dev
    seeded = [seed(dev, name) for name in ("celeryone", "celerytwo")]
    run_ids = [
        launch_pipeline_run(
            dev.sessions,
            workspace_id=pipeline.workspace_id,
            pipeline_id=pipeline.pipeline_id,
            launcher=GraphQLLauncher(dev.ui_url),
        )
        for pipeline in seeded
    ]
    runs = [
        wait_for(f"run {run_id} to end", lambda run_id=run_id: dev.ended(run_id), timeout=RUN_WITHIN_SECONDS)
        for run_id in run_ids
    ]

    tasks = dev.instance.run_launcher.celery
    node = f"{WORKER_NAME}@{socket.gethostname()}"
    for run, pipeline in zip(runs, seeded, strict=True):
        assert run.status == dg.DagsterRunStatus.SUCCESS, f"{dev.log_tail()}\n{celery.worker_log_tail()}"
        # The launcher's task, as the result backend (Redis, extended results) recorded it: run by this worker.
        task = tasks.AsyncResult(run.tags[TASK_ID_TAG])
        assert (task.state, task.worker) == ("SUCCESS", node)
        assert sorted(documents(dev, pipeline.pipeline_id)) == sorted(pipeline.urls)
        assert ledger.charges(dev.sessions, pipeline.workspace_id) == [f"crawl:{run.run_id}:{pipeline.pipeline_id}"]
    # Both runs executed in the worker's one pool process: no process was started for either.
    pool = {child.pid for child in psutil.Process(celery.worker.pid).children()}
    pids = {dev.run_pid(run.run_id) for run in runs}
    assert len(pids) == 1 and pids <= pool, (pids, pool)
