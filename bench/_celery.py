"""The Celery profile for the benches: the services it needs (PostgreSQL, the RabbitMQ broker, Redis),
deploy/dagster.celery.yaml on a private queue and Redis key prefix (the broker and Redis are shared with
other sessions on the machine, whose workers must not take these runs), and a `pipelines-dagster worker`
started in a directory of its own, measured and cleaned up after."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _corpus import BIN, REPO, stop_group

# The same services the tests use, and the same variables to point elsewhere.
POSTGRES_ADMIN_URL = os.environ.get(
    "PIPELINES_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BROKER_URL = os.environ.get("PIPELINES_TEST_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
WORKER_READY_SECONDS = 90


def require_services() -> None:
    """Exit, naming each one and the variable that points elsewhere, when PostgreSQL, Redis or the broker
    does not answer."""
    import redis
    import sqlalchemy as sa
    from kombu import Connection

    missing = []
    engine = sa.create_engine(sa.make_url(POSTGRES_ADMIN_URL).set(drivername="postgresql+psycopg2"))
    try:
        with engine.connect():
            pass
    except sa.exc.SQLAlchemyError as exc:
        missing.append(f"PostgreSQL at {POSTGRES_ADMIN_URL} ({str(exc).splitlines()[0]}; PIPELINES_TEST_POSTGRES_URL)")
    finally:
        engine.dispose()
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        missing.append(f"Redis at {REDIS_URL} ({exc}; PIPELINES_TEST_REDIS_URL)")
    finally:
        client.close()
    try:
        with Connection(BROKER_URL, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as exc:  # kombu raises the transport's own errors, OSError among them
        missing.append(f"the RabbitMQ broker at {BROKER_URL} ({exc}; PIPELINES_TEST_BROKER_URL)")
    if missing:
        raise SystemExit(
            "this bench needs " + "; ".join(missing) + ": start the service, or point the variable named at one"
        )


def celery_profile(directory: Path, queue: str, *, pool_processes: int) -> Path:
    """deploy/dagster.celery.yaml with runs sent to `queue`, task states kept under `queue:` in Redis, and as many
    runs launched at once as the workers have `pool_processes`, as the profile asks."""
    import yaml

    config = yaml.safe_load((REPO / "deploy" / "dagster.celery.yaml").read_text())
    config["concurrency"]["runs"]["max_concurrent_runs"] = pool_processes
    launcher = config["run_launcher"]["config"]
    launcher["default_queue"] = queue
    launcher["config_source"]["result_backend_transport_options"] = {"global_keyprefix": f"{queue}:"}
    path = directory / "dagster.celery.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


GUARD_WARNING = re.compile(r"left this pool process changed; put back where possible: (.*)$")


def runs_left_changed(log: Path) -> Counter[str]:
    """What the pool guard's WARNINGs in a worker's `log` named as left changed by runs, each as "part: name"
    (descriptor numbers and socket inodes as N), with how many runs left it."""
    named: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        if found := GUARD_WARNING.search(line):
            for part in found.group(1).split("; "):
                kind, _, names = part.partition(": ")
                named.update(f"{kind}: {re.sub(r'[0-9]+', 'N', name)}" for name in names.split(", "))
    return named


def tree_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds used so far by a Celery worker and everything under it, by part: "main" (the worker's own
    process), "pool" (its pool processes, where runs execute), "started by runs" (the processes runs started,
    extraction workers: those that ended, reaped by the pool processes, and those still there)."""
    import psutil

    root = psutil.Process(pid)
    pool = set(root.children())
    parts = {"main": 0.0, "pool": 0.0, "started by runs": 0.0}
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        part = "main" if process == root else "pool" if process in pool else "started by runs"
        parts[part] += times.user + times.system
        parts["started by runs" if process in pool else part] += times.children_user + times.children_system
    return parts


class Worker:
    """`pipelines-dagster worker` on `env` (a Celery profile's, whose Dagster instance is `instance`), with
    `concurrency` pool processes, run from `directory` as if on a machine of its own; entered once Celery says it
    is ready. On exit it is stopped and what its runs left on the shared broker and Redis (the queue, the task
    states) is deleted."""

    def __init__(
        self, env: dict[str, str], instance: Any, directory: Path, *, queue: str, concurrency: int, name: str
    ) -> None:
        self.env, self.instance, self.directory, self.queue = env, instance, directory, queue
        self.concurrency, self.name = concurrency, name
        self.log = directory / "worker.log"

    def __enter__(self) -> Worker:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                str(BIN / "pipelines-dagster"),
                "worker",
                "--name",
                self.name,
                "--concurrency",
                str(self.concurrency),
            ],
            cwd=self.directory,
            env=self.env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + WORKER_READY_SECONDS
        while b" ready." not in self.log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                stop_group(self.process)
                raise SystemExit(f"the Celery worker did not get ready:\n{self.tail()}")
            time.sleep(0.2)
        return self

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def cpu_seconds(self) -> dict[str, float]:
        return tree_cpu_seconds(self.process.pid)

    def runs_left_changed(self) -> Counter[str]:
        return runs_left_changed(self.log)

    def __exit__(self, *exc_info: object) -> None:
        import redis

        stop_group(self.process)
        with self.instance.run_launcher.celery.connection_for_write() as connection:
            connection.default_channel.queue_delete(self.queue)
        client = redis.Redis.from_url(REDIS_URL)
        try:
            for key in client.scan_iter(f"{self.queue}:*"):
                client.delete(key)
        finally:
            client.close()
