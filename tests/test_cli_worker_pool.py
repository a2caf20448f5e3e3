"""A pool process of a real Celery prefork worker, guarded as `pipelines-dagster worker` guards its own: a task
that changes the process's environment, loggers, garbage collector, signal handlers, working directory, import
path, warning filters and socket timeout leaves none of it to the next task in that process, and the worker's
log names what it changed (and the thread and file it left, which cannot be undone); what the code location
set as the pool process imported it, before its first task, stays."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.leaky_tasks import KEPT_VARIABLE, LEAKED_VARIABLE, app
from tests.support.processes import stop_group

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[1]
READY_SECONDS = 60


@pytest.fixture
def worker(broker_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A one-process prefork worker of the leaky app on a queue of its own: the queue, and the worker's log."""
    queue = f"leaky-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    env = {**os.environ, "LEAKY_BROKER_URL": broker_url, KEPT_VARIABLE: "1", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.support.leaky_tasks",
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            f"--queues={queue}",
            f"--hostname={queue}@%h",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=tmp_path,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while b" ready." not in log.read_bytes():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        yield queue, log
    finally:
        stop_group(process)
        app.conf.broker_url = broker_url
        with app.connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)


def test_nothing_a_task_sets_reaches_the_next_task_in_the_pool_process(
    worker: tuple[str, Path], broker_url: str, tmp_path: Path
) -> None:
    queue, log = worker
    app.conf.broker_url = broker_url
    first = app.send_task("observe", queue=queue).get(timeout=60)
    packed = {"__class__": "ExecuteRunArgs", "run_id": "run-that-leaks"}
    leaker = app.send_task("leak", kwargs={"execute_job_args_packed": packed}, queue=queue).get(timeout=60)
    after = app.send_task("observe", queue=queue).get(timeout=60)
    assert first["pid"] == leaker == after["pid"], "the tasks ran in different pool processes"
    # After its first task the pool process keeps its long-lived objects out of the collector's passes.
    assert first.pop("frozen") == 0 and after.pop("frozen") > 0
    assert after == first
    # The code location was imported before the first task, in the pool process: what its import set stays.
    assert first["location_loaded"] == str(first["pid"])
    assert KEPT_VARIABLE in after["variables"] and LEAKED_VARIABLE not in after["variables"]
    assert (after["logger_handlers"], after["gc"][0], after["cwd"]) == (0, True, str(tmp_path))
    warning = next(line for line in log.read_text().splitlines() if "left this pool process changed" in line)
    for named in (
        "run run-that-leaks (task leak ",
        "environment variables: LEAKY_KEPT, LEAKY_RUN_SECRET",
        "loggers: pipelines_dagster.leaky, root",
        "garbage collector: enabled state or thresholds",
        "signal handlers: SIGUSR1",
        "working directory: changed",
        "sys.path: changed",
        "warning filters: changed",
        "interpreter settings",
        "threads still running: leaky-thread (daemon)",
        "file descriptors still open: ",
    ):
        assert named in warning, warning
    assert os.devnull in warning and "hunter2" not in warning
    # What every Dagster run sets is put back too, without a word.
    assert "SF_PARTNER" not in after["variables"] and "SF_PARTNER" not in warning
