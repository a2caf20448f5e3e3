"""Memory of a long-lived Celery pool process over many runs (issue 26, item 1), measured as a user runs it:
`dagster dev` on the Celery profile (deploy/dagster.celery.yaml: PostgreSQL storage, RabbitMQ, Redis) and one
`pipelines-dagster worker --concurrency 1`, executing N one-page KB runs launched through the webserver as
run-nows are, each over a page that changed since its last crawl (so every run fetches, extracts, indexes and
diffs it). The worker replaces its pool process every 200 runs (--max-tasks-per-child).

Every 50 runs the feeding pauses until the pool process is idle, and its USS and RSS are sampled (USS: the
memory only it holds, which is what a run leaves behind; RSS counts pages it shares with the worker it was
forked from). Printed: each sample, the growth per 100 runs within each pool process, and the peak of the
first pool process (runs 0-200) against the peak of every later one.

Target: the peak USS over runs 200-N <= the peak USS over runs 0-200 + 5 %. A later pool process forks from
the same worker and executes the same runs, so only what runs leave behind in the worker itself, or growth
a replacement cannot reset, would lift it; 5 % covers where the allocator happens to place a process's
objects, seen to differ by a few MiB between forks. Also printed: the WARNINGs of the worker's pool guard, by
what the runs left changed. Exits 1 when the target is missed or a run did not succeed.

`--smoke`: 10 runs, sampled every 5; fails only when a run did not succeed. Needs PostgreSQL
($PIPELINES_BENCH_POSTGRES_URL, default postgresql://postgres@127.0.0.1:5432/postgres), RabbitMQ
($PIPELINES_BENCH_BROKER_URL, default amqp://guest:guest@127.0.0.1:5672//) and Redis
($PIPELINES_BENCH_REDIS_URL, default redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _celery import runs_left_changed
from _corpus import (
    BIN,
    OUR_LOCATION,
    OUR_LOCATION_YAML,
    REPO,
    DagsterDev,
    KiB,
    free_port,
    page_html,
    seed_pipeline,
    stop_group,
)
from history_query import fresh_databases

POSTGRES_URL = os.environ.get("PIPELINES_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BROKER_URL = os.environ.get("PIPELINES_BENCH_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("PIPELINES_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
RUNS, SAMPLE_EVERY = 1000, 50
SMOKE_RUNS, SMOKE_SAMPLE_EVERY = 10, 5
# Pipelines taking turns: each has at most one run at a time (the profile's limit), and this many keep the
# one pool process fed while the daemon dequeues the next.
PIPELINES = 6
PAGE_BYTES = 20 * KiB
MARGIN = 0.05
RUN_TIMEOUT_SECONDS = 300
WORKER_READY_SECONDS = 90
MiB = 1024 * 1024


class ChangingPages:
    """One page per path on 127.0.0.1, whose text changes on every request (no validators): every crawl of
    it fetches, extracts and stores a changed page."""

    def __init__(self, pages: int) -> None:
        rng = random.Random(20261205)
        self._bodies = [page_html(rng, index, pages=pages, min_bytes=PAGE_BYTES) for index in range(pages)]
        self._served = 0
        self._lock = threading.Lock()
        pages_of = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages_of.body(self.path)
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8" if body else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/page-{index}.html"

    def body(self, path: str) -> bytes:
        if path == "/robots.txt":
            return b"User-agent: *\nAllow: /\n"
        found = re.fullmatch(r"/page-(\d+)\.html", path)
        if found is None or int(found.group(1)) >= len(self._bodies):
            return b""
        with self._lock:
            self._served += 1
            revision = self._served
        marker = f"<p>Revision {revision} of this page.</p></body>".encode()
        return self._bodies[int(found.group(1))].replace(b"</body>", marker)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def database(label: str) -> Iterator[str]:
    """A new PostgreSQL database beside POSTGRES_URL's, dropped afterwards: its URL (psycopg2)."""
    import sqlalchemy as sa

    with fresh_databases(
        sa.make_url(POSTGRES_URL).set(drivername="postgresql+psycopg2").render_as_string(hide_password=False),
        f"bench_worker_memory_{label}_{uuid.uuid4().hex[:6]}",
    ) as [url]:
        yield url


class CeleryHome:
    """The Celery profile in a temporary directory, for `_corpus.DagsterDev`: DAGSTER_HOME holding
    deploy/dagster.celery.yaml with runs sent to a queue of this bench's own (the broker and Redis may be
    shared), storage and app database in fresh PostgreSQL databases; this process switched onto them."""

    def __init__(self, stack: ExitStack) -> None:
        import dagster as dg
        import yaml

        from pipelines_dagster.app_db.engine import create_engine, session_factory
        from pipelines_dagster.app_db.migrate import upgrade

        self.dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="worker-memory-")))
        self.queue = f"bench-memory-{uuid.uuid4().hex[:8]}"
        home = self.dir / "dagster-home"
        home.mkdir()
        config = yaml.safe_load((REPO / "deploy" / "dagster.celery.yaml").read_text())
        launcher = config["run_launcher"]["config"]
        launcher["default_queue"] = self.queue
        launcher["config_source"]["result_backend_transport_options"] = {"global_keyprefix": f"{self.queue}:"}
        (home / "dagster.yaml").write_text(yaml.safe_dump(config))
        app_url = stack.enter_context(database("app"))
        self.env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINES_", "DAGSTER_"))}
        self.env |= {
            "DAGSTER_HOME": str(home),
            "DAGSTER_PG_URL": stack.enter_context(database("dagster")),
            "PIPELINES_DATABASE_URL": app_url,
            "PIPELINES_DATA_DIR": str(self.dir / "data"),
            "PIPELINES_CELERY_BROKER_URL": BROKER_URL,
            "PIPELINES_CELERY_BACKEND_URL": REDIS_URL,
            "PIPELINES_CRAWLER_ALLOWED_NETWORKS": "127.0.0.1/32",
            "PIPELINES_DAGSTER_URL": f"http://127.0.0.1:{free_port()}",
            "PIPELINES_EXTRACTION_SLOTS_DIR": str(self.dir / "extraction-slots"),
        }
        os.environ.clear()
        os.environ.update(self.env)
        engine = create_engine(app_url)
        stack.callback(engine.dispose)
        upgrade(engine)
        self.sessions = session_factory(engine)
        self.instance = dg.DagsterInstance.get()
        stack.callback(self.instance.dispose)
        stack.callback(self._clean_broker)

    def _clean_broker(self) -> None:
        """What the runs left on the shared broker and Redis: the queue, and the task states."""
        import redis

        with self.instance.run_launcher.celery.connection_for_write() as connection:
            connection.default_channel.queue_delete(self.queue)
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{self.queue}:*"):
            client.delete(key)
        client.close()


class Worker:
    """`pipelines-dagster worker --concurrency 1` on the home's queue, once Celery says it is ready."""

    def __init__(self, home: CeleryHome) -> None:
        directory = home.dir / "worker"
        directory.mkdir()
        self.log = directory / "worker.log"
        self.process = subprocess.Popen(
            [str(BIN / "pipelines-dagster"), "worker", "--name", home.queue, "--concurrency", "1"],
            cwd=directory,
            env=home.env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + WORKER_READY_SECONDS
        while b" ready." not in self.log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"the worker did not get ready:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)

    def pool_process(self) -> Any:
        """The one live pool process, once there is exactly one (a replaced one is gone, or a zombie whose memory
        reads as 0), with its memory and CPU times read: (process, memory, cpu)."""
        import psutil

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            children = psutil.Process(self.process.pid).children()
            if len(children) == 1:
                try:
                    memory, cpu = children[0].memory_full_info(), children[0].cpu_times()
                    if children[0].status() != psutil.STATUS_ZOMBIE and memory.rss:
                        return children[0], memory, cpu
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.1)
        raise SystemExit("the worker has no single live pool process")

    def guard_warnings(self) -> Counter[str]:
        """How many runs' WARNINGs named each thing (part: name) they left changed in the pool process."""
        return runs_left_changed(self.log)

    def stop(self) -> None:
        stop_group(self.process)


@dataclass
class Sample:
    runs: int
    pid: int
    uss: int
    rss: int
    # Forked and not yet through a run: under a CPU-second used.
    fresh: bool


@dataclass
class Feeder:
    """Launches runs through the webserver, each pipeline's next once its last one ended."""

    deployment: DagsterDev
    pipelines: list[tuple[int, int]]
    outstanding: dict[int, str] = field(default_factory=dict)
    done: int = 0
    failed: list[str] = field(default_factory=list)

    def run_until(self, total: int, launched_so_far: int) -> int:
        """Launch until `total` runs were launched; return once all of them ended. Returns runs launched."""
        from pipelines_dagster.launch import GraphQLLauncher, launch_pipeline_run

        launcher = GraphQLLauncher(self.deployment.url)
        launched = launched_so_far
        while launched < total or self.outstanding:
            for index, (workspace_id, pipeline_id) in enumerate(self.pipelines):
                if index in self.outstanding or launched >= total:
                    continue
                self.outstanding[index] = launch_pipeline_run(
                    self.deployment.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id, launcher=launcher
                )
                launched += 1
            for index, run_id in list(self.outstanding.items()):
                run = self.deployment.instance.get_run_by_id(run_id)
                if run is not None and run.is_finished:
                    del self.outstanding[index]
                    self.done += 1
                    if run.status.value != "SUCCESS":
                        self.failed.append(f"{run_id} {run.status.value}")
            time.sleep(0.1)
        return launched


def sample(worker: Worker, runs: int) -> Sample:
    process, memory, cpu = worker.pool_process()
    return Sample(runs=runs, pid=process.pid, uss=memory.uss, rss=memory.rss, fresh=cpu.user + cpu.system < 1.0)


def report(samples: list[Sample], *, smoke: bool) -> bool:
    """Print the samples and figures; whether the target holds (always, for a smoke run)."""
    print(f"{'runs':>6} {'pool pid':>9} {'USS MiB':>9} {'RSS MiB':>9}")
    for one in samples:
        fresh = "  (fresh, no run yet)" if one.fresh else ""
        print(f"{one.runs:>6} {one.pid:>9} {one.uss / MiB:>9.1f} {one.rss / MiB:>9.1f}{fresh}")
    # Per pool process, over its samples after its first run (a fresh one has not loaded the code location yet).
    children: dict[int, list[Sample]] = {}
    for one in samples:
        if not one.fresh:
            children.setdefault(one.pid, []).append(one)
    for generation, (pid, ran) in enumerate(children.items()):
        if len(ran) >= 2:
            growth = (ran[-1].uss - ran[0].uss) / (ran[-1].runs - ran[0].runs) * 100 / MiB
            print(
                f"pool process {generation + 1} (pid {pid}): USS {ran[0].uss / MiB:.1f} -> {ran[-1].uss / MiB:.1f} MiB "
                f"over runs {ran[0].runs}-{ran[-1].runs}: {growth:+.2f} MiB per 100 runs"
            )
    generations = list(children.values())
    if not generations:
        print("no sample after a run")
        return smoke
    first_peak = max(one.uss for one in generations[0])
    if len(generations) < 2:
        print(f"peak USS {first_peak / MiB:.1f} MiB; one pool process only, so no replacement to compare")
        return True
    later_peak = max(one.uss for taken in generations[1:] for one in taken)
    limit = first_peak * (1 + MARGIN)
    held = later_peak <= limit
    print(
        f"peak USS after the first replacement {later_peak / MiB:.1f} MiB vs first pool process {first_peak / MiB:.1f} "
        f"MiB: {later_peak / first_peak:.3f} x (target <= {1 + MARGIN:.2f} x) {'OK' if held else 'MISSED'}"
    )
    return held or smoke


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="10 runs; fail only when a run did not succeed")
    parser.add_argument("--runs", type=int, default=None, help=f"runs to execute (default {RUNS})")
    parser.add_argument("--sample-every", type=int, default=None, help=f"runs between samples (default {SAMPLE_EVERY})")
    args = parser.parse_args()
    runs = args.runs or (SMOKE_RUNS if args.smoke else RUNS)
    # Stopped early (SIGTERM), it still stops the worker and dagster dev and drops its databases.
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    every = args.sample_every or (SMOKE_SAMPLE_EVERY if args.smoke else SAMPLE_EVERY)
    with ExitStack() as stack:
        pages = ChangingPages(PIPELINES)
        stack.callback(pages.close)
        home = CeleryHome(stack)
        deployment = DagsterDev(
            home, workspace_yaml=f"load_from:\n{OUR_LOCATION_YAML}", locations=(OUR_LOCATION,), sensors=()
        )  # type: ignore[arg-type]
        stack.callback(deployment.stop)
        deployment.start()
        worker = Worker(home)
        stack.callback(worker.stop)
        pipelines = [
            seed_pipeline(home.sessions, home.instance, [pages.url(index)], name=f"memory{index}", save_to_kb=True)
            for index in range(PIPELINES)
        ]
        feeder = Feeder(deployment, pipelines)
        samples = [sample(worker, 0)]
        started = time.monotonic()
        launched = 0
        while launched < runs:
            launched = feeder.run_until(min(runs, launched + every), launched)
            samples.append(taken := sample(worker, feeder.done))
            rate = feeder.done / (time.monotonic() - started) * 60
            print(
                f"{feeder.done} runs, {rate:.1f} runs/min, {len(feeder.failed)} not succeeded; pool process "
                f"{taken.pid}: USS {taken.uss / MiB:.1f} MiB, RSS {taken.rss / MiB:.1f} MiB",
                flush=True,
            )
        ok = report(samples, smoke=args.smoke)
        warned = worker.guard_warnings()
        print(
            "what runs left changed in the pool process, put back after each (runs that did): "
            + ("; ".join(f"{thing} ({count})" for thing, count in warned.most_common()) or "nothing")
        )
        if feeder.failed:
            print(f"{len(feeder.failed)} runs did not succeed: {feeder.failed[:5]}; worker log {worker.log}")
            shutil.copy(worker.log, Path(tempfile.gettempdir()) / "worker-memory-failed.log")
            return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
