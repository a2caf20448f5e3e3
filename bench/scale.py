"""Beyond one machine (issue 26): the Celery profile against today's, measured in one run on one machine.

Both profiles keep Dagster's storage and the app database in PostgreSQL (fresh databases each) and run
`dagster dev` over our code location, crawling one-page KB pipelines of a corpus served on loopback:

  today   deploy/dagster.postgres.yaml: Dagster's default launcher, a new process per run;
  Celery  deploy/dagster.celery.yaml: dagster-celery's CeleryRunLauncher, runs sent through RabbitMQ (task
          states in Redis) to one `pipelines-dagster worker` on this machine with a pool process per core.

The profiles are measured one after the other, each with the machine to itself:

  (a) one run per fire: N one-page pipelines fired by one domain event (as bench/run_overhead.py (b)),
      runs per minute from the event to the end of the last run; and the CPU seconds per run the
      worker's process tree used (psutil);
  (b) batched: M one-page pipelines whose schedules fall due at once, run by the schedule sensor as
      pipeline_batch runs (as bench/run_overhead.py (d)): pipeline crawls per minute from the sensor's
      first run to the end of the last (the 0-15 s until the sensor's next tick is chance);
  (c) queue lag of (a)'s runs: dequeue -> RUN_START in each run's event log, p50 and p95 (Dagster 1.13
      writes RUN_STARTING at the dequeue and no RUN_DEQUEUED; see `lifecycles`).

Targets (issue 26): (a) Celery >= 1.5 x today's runs/min, <= 0.4 CPU-s per run in the worker; (b) Celery
>= 0.9 x today's crawls/min; (c) Celery p50 <= 0.5 s, p95 <= 2 s; (d) no fire later than 60 s behind its due
time, notification lag <= 30 s; (e) p95 <= 2 s at 50,000 partitions. Each figure is printed with its target;
exits 1 when one is missed or a run or crawl did not succeed.

  (d) steady state: 10,000 pipelines on hourly schedules for 10 minutes on the Celery profile
      (bench/_scale_steady.py: fires due vs crawled, fire and notification lag, peak connections, event-log
      growth, what 100,000 would need);
  (e) the crawl_results asset page and partition view through the webserver's GraphQL at 10,000, 50,000 and
      100,000 partitions (bench/_scale_partitions.py).

A part is a function that returns figures, in PARTS; (d) and (e) measure what they need themselves, and each
also runs alone. `--parts` picks some (a full run takes about an hour on 2 cores). `--smoke`: the same code
paths at tiny sizes (3 fired and 6 scheduled pipelines, 20 hourly ones over a minute, 200
partitions); exits 1 only when something did not work, whatever the figures.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _celery import BROKER_URL, POSTGRES_ADMIN_URL, REDIS_URL, Worker, celery_profile, require_services
from _corpus import OUR_LOCATION, OUR_LOCATION_YAML, REPO, DagsterDev, EmbeddedHome, KiB, free_port, served_corpus
from history_query import fresh_databases
from run_overhead import measure_batched, measure_ours, seed_pipelines

SEED = 20261201
RUNS, SCHEDULED = 40, 240
SMOKE_RUNS, SMOKE_SCHEDULED = 3, 6
FIRED_RATIO_TARGET = 1.5
WORKER_CPU_TARGET = 0.4
BATCHED_RATIO_TARGET = 0.9
LAG_P50_TARGET, LAG_P95_TARGET = 0.5, 2.0
STEADY_PIPELINES, STEADY_MINUTES = 10_000, 10.0
TODAY, CELERY = "today", "Celery"
WORKSPACE_YAML = "load_from:\n" + OUR_LOCATION_YAML
SENSORS = ("pipeline_events", "pipeline_schedules")
# The engine event dagster-celery's launcher writes once apply_async has returned.
FORWARDED = "Celery task has been forwarded to the broker"


@dataclass
class Profile:
    """What one profile did: (a)'s and (b)'s results as run_overhead measures them, the worker's CPU seconds over
    (a) by part (None when runs are processes of the daemon's machine), and each of (a)'s runs' lifecycle times."""

    name: str
    fired: dict[str, Any]
    batched: dict[str, Any]
    worker_cpu: dict[str, float] | None
    left_changed: Counter[str] | None
    lifecycles: list[dict[str, float]]


@dataclass
class Figure:
    """One printed figure; `met` is None for a figure shown for reference, without a target."""

    label: str
    value: str
    target: str = ""
    met: bool | None = None
    judged_in_smoke: bool = False
    """The part itself judges what a smoke run must get right (d, e): a miss fails a smoke run too."""


@dataclass
class Bench:
    args: argparse.Namespace
    profiles: dict[str, Profile]
    failures: list[str] = field(default_factory=list)


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value at least `share` of `values` do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def lifecycles(instance: Any, run_ids: list[str]) -> list[dict[str, float]]:
    """When each run was queued (RUN_ENQUEUED), dequeued (RUN_STARTING), handed to the broker (the Celery
    launcher's "forwarded to the broker" engine event; absent for the default launcher), began executing its
    code (RUN_START) and succeeded (RUN_SUCCESS, if it did), from its event log.

    Dagster 1.13 writes no RUN_DEQUEUED event (the enum member is left, unused): the daemon's dequeue
    (QueuedRunCoordinatorDaemon._dequeue_run) writes RUN_STARTING just before it calls the run launcher, so
    RUN_STARTING marks the dequeue."""
    import dagster as dg

    kinds = {
        dg.DagsterEventType.RUN_ENQUEUED,
        dg.DagsterEventType.RUN_STARTING,
        dg.DagsterEventType.RUN_START,
        dg.DagsterEventType.RUN_SUCCESS,
    }
    found = []
    for run_id in run_ids:
        times: dict[str, float] = {}
        for entry in instance.all_logs(run_id, of_type={*kinds, dg.DagsterEventType.ENGINE_EVENT}):
            assert entry.dagster_event is not None
            kind = entry.dagster_event.event_type
            if kind in kinds:
                times.setdefault(kind.name, entry.timestamp)
            elif FORWARDED in (entry.message or ""):
                times.setdefault(FORWARDED, entry.timestamp)
        missing = {kind.name for kind in kinds if kind != dg.DagsterEventType.RUN_SUCCESS} - times.keys()
        if missing:
            raise SystemExit(f"run {run_id} has no {', '.join(sorted(missing))} event in its event log")
        found.append(times)
    return found


@contextmanager
def deployment_of(profile: str, directory: Path, dagster_url: str, app_url: str) -> Iterator[tuple[DagsterDev, Any]]:
    """`dagster dev` on the profile's instance config over fresh PostgreSQL databases, and for the Celery profile
    a worker with a pool process per core on a private queue: (deployment, worker or None)."""
    from pipelines_dagster.core.crawl.crawler import usable_cores

    env = {
        "DAGSTER_PG_URL": dagster_url,
        "PIPELINES_DATABASE_URL": app_url,
        "PIPELINES_DAGSTER_URL": f"http://127.0.0.1:{free_port()}",
    }
    queue = f"pipelines-bench-{uuid.uuid4().hex[:8]}"
    if profile == CELERY:
        config = celery_profile(directory, queue, pool_processes=usable_cores())
        env |= {"PIPELINES_CELERY_BROKER_URL": BROKER_URL, "PIPELINES_CELERY_BACKEND_URL": REDIS_URL}
    else:
        config = REPO / "deploy" / "dagster.postgres.yaml"
    with ExitStack() as stack:
        home = stack.enter_context(EmbeddedHome(instance_config=config, **env))
        deployment = DagsterDev(home, workspace_yaml=WORKSPACE_YAML, locations=(OUR_LOCATION,), sensors=SENSORS)
        stack.callback(deployment.stop)
        deployment.start()
        worker = None
        if profile == CELERY:
            worker = stack.enter_context(
                Worker(
                    home.env,
                    home.instance,
                    directory / "worker",
                    queue=queue,
                    concurrency=usable_cores(),
                    name="bench",
                )
            )
        yield deployment, worker


def measure_profile(profile: str, urls: list[str], *, runs: int, scheduled: int) -> Profile:
    label = profile.lower()
    names = [f"bench_scale_{label}_{part}_{uuid.uuid4().hex[:6]}" for part in ("dagster", "app")]
    with (
        tempfile.TemporaryDirectory(prefix=f"scale-{label}-") as directory,
        fresh_databases(POSTGRES_ADMIN_URL, *names) as (dagster_url, app_url),
        deployment_of(profile, Path(directory), dagster_url, app_url) as (deployment, worker),
    ):
        fired_workspace, _ = seed_pipelines(
            deployment,
            urls[:runs],
            pages_per_pipeline=1,
            count=runs,
            event_type="refresh.requested",
            name=f"fired {label}",
        )
        batched_workspace, batched_pipelines = seed_pipelines(
            deployment,
            urls[runs : runs + scheduled],
            pages_per_pipeline=1,
            count=scheduled,
            event_type=None,
            name=f"scheduled {label}",
            scheduled=True,
        )
        before = worker.cpu_seconds() if worker else {}
        fired = measure_ours(deployment, fired_workspace, runs)
        worker_cpu = left_changed = None
        if worker:
            worker_cpu = {part: seconds - before[part] for part, seconds in worker.cpu_seconds().items()}
            left_changed = worker.runs_left_changed()
        batched = measure_batched(deployment, batched_workspace, batched_pipelines)
        return Profile(
            name=profile,
            fired=fired,
            batched=batched,
            worker_cpu=worker_cpu,
            left_changed=left_changed,
            lifecycles=lifecycles(deployment.instance, fired["run_ids"]),
        )


def ratio_figure(label: str, celery: float, today: float, target: float, unit: str) -> list[Figure]:
    return [
        Figure(f"{label}, today's profile", f"{today:.1f} {unit}"),
        Figure(f"{label}, Celery profile", f"{celery:.1f} {unit}"),
        Figure(f"{label}, Celery / today", f"{celery / today:.2f}", f">= {target}", celery / today >= target),
    ]


def one_run_per_fire(bench: Bench) -> list[Figure]:
    """(a) N one-page pipelines fired by one event: runs per minute and the worker's CPU per run."""
    today, celery = bench.profiles[TODAY], bench.profiles[CELERY]
    runs = bench.args.runs
    figures = ratio_figure(
        f"(a) {runs} runs fired by one event", celery.fired["per_minute"], today.fired["per_minute"],
        FIRED_RATIO_TARGET, "runs/min",
    )  # fmt: skip
    assert celery.worker_cpu is not None
    per_run = sum(celery.worker_cpu.values()) / runs
    parts = ", ".join(f"{part} {seconds / runs:.2f}" for part, seconds in celery.worker_cpu.items())
    figures.append(
        Figure(
            "(a) CPU per one-page run in the Celery worker's process tree",
            f"{per_run:.2f} CPU-s ({parts})",
            f"<= {WORKER_CPU_TARGET}",
            per_run <= WORKER_CPU_TARGET,
        )
    )
    assert celery.left_changed is not None
    changed = ", ".join(f"{change} ({runs} runs)" for change, runs in celery.left_changed.most_common()) or "nothing"
    figures.append(Figure("(a) what runs left changed in their pool process (the worker's log)", changed))
    for profile in (today, celery):
        figures.append(Figure(f"(a) {profile.name}: CPU of `dagster dev`'s parts", profile.fired["cpu"].describe(runs)))
        durations = [end["RUN_SUCCESS"] - end["RUN_START"] for end in profile.lifecycles if "RUN_SUCCESS" in end]
        figures.append(
            Figure(
                f"(a) {profile.name}: a run's RUN_START -> RUN_SUCCESS",
                f"p50 {percentile(durations, 0.5):.2f} s, p95 {percentile(durations, 0.95):.2f} s",
            )
        )
    return figures


def sensor_to_end(result: dict[str, Any], pipelines: int) -> float:
    """Pipeline crawls per minute from the schedule sensor's tick that made the first run to the end of the last
    run: the sensor ticks every 15 s, so the wait from the moment the schedules fell due to its next tick is
    chance, 0-15 s in either profile, and not the launcher's."""
    return pipelines / (result["seconds"] - result["tick_latency"]) * 60


def batched(bench: Bench) -> list[Figure]:
    """(b) M pipelines due at once, run as batch runs: pipeline crawls per minute."""
    today, celery = bench.profiles[TODAY], bench.profiles[CELERY]
    scheduled = bench.args.scheduled
    figures = ratio_figure(
        f"(b) {scheduled} pipelines due at once, from the sensor's first run", sensor_to_end(celery.batched, scheduled),
        sensor_to_end(today.batched, scheduled), BATCHED_RATIO_TARGET, "crawls/min",
    )  # fmt: skip
    for profile in (today, celery):
        result = profile.batched
        figures.append(
            Figure(
                f"(b) {profile.name}: {result['runs']} runs ({result['batch_runs']} batch runs)",
                f"{result['per_minute']:.1f} crawls/min from the moment they fell due, {result['seconds']:.1f} s, "
                f"{result['tick_latency']:.1f} s of it before the sensor's first run; "
                f"{result['cpu'].describe(scheduled, per='pipeline')}",
            )
        )
    return figures


def queue_lag(bench: Bench) -> list[Figure]:
    """(c) dequeue (RUN_STARTING, see `lifecycles`) -> RUN_START of (a)'s runs, p50 and p95; and where the time
    went: in the launcher (dequeue -> the task is on the broker) and from there to the run's code starting
    (waiting on the broker for a free pool process, and the pool process's start of the run)."""
    figures = []
    for profile in bench.profiles.values():
        spans = {
            "waiting in Dagster's queue": ("RUN_ENQUEUED", "RUN_STARTING"),
            "launcher": ("RUN_STARTING", FORWARDED),
            "broker and worker": (FORWARDED, "RUN_START"),
        }
        judged = profile.name == CELERY
        for share, target in ((0.5, LAG_P50_TARGET), (0.95, LAG_P95_TARGET)):
            value = percentile([times["RUN_START"] - times["RUN_STARTING"] for times in profile.lifecycles], share)
            parts = ", ".join(
                f"{span} {percentile([times[end] - times[start] for times in profile.lifecycles], share):.2f} s"
                for span, (start, end) in spans.items()
                if all(start in times and end in times for times in profile.lifecycles)
            )
            figures.append(
                Figure(
                    f"(c) {profile.name}: queue lag, dequeue (RUN_STARTING) -> RUN_START, p{share * 100:.0f}",
                    f"{value:.2f} s (each span's own p{share * 100:.0f}: {parts})",
                    f"<= {target} s" if judged else "",
                    value <= target if judged else None,
                )
            )
    return figures


def steady_state(bench: Bench) -> list[Figure]:
    """(d): hourly pipelines in steady state on the Celery profile (bench/_scale_steady.py, which says how)."""
    import _scale_steady

    size = (
        (_scale_steady.SMOKE_PIPELINES, _scale_steady.SMOKE_MINUTES)
        if bench.args.smoke
        else (STEADY_PIPELINES, STEADY_MINUTES)
    )
    return [
        Figure(f"(d) {f.label}", f"{f.value:g} {f.unit}", f.target or "", f.ok if f.target else None, True)
        for f in _scale_steady.measure(*size, smoke=bench.args.smoke)
    ]


def partition_pages(bench: Bench) -> list[Figure]:
    """(e): the crawl_results asset page and partition view through the webserver's GraphQL at many partitions
    (bench/_scale_partitions.py, which says how)."""
    import _scale_partitions

    sizes = _scale_partitions.SMOKE_SIZES if bench.args.smoke else _scale_partitions.SIZES
    return [
        Figure(f.label, f"{f.value:.3f} {f.unit}", f.target, f.ok, True)
        for f in _scale_partitions.measure(sizes, smoke=bench.args.smoke)
    ]


PARTS: dict[str, Callable[[Bench], list[Figure]]] = {
    "a": one_run_per_fire,
    "b": batched,
    "c": queue_lag,
    "d": steady_state,
    "e": partition_pages,
}
# The parts that compare the two profiles, measured together before any of them is printed.
PROFILE_PARTS = frozenset("abc")


def machine() -> str:
    """The time, and the machine's load from `uptime`: the figures of a shared machine need both beside them."""
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    return f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')} ({uptime})"


def check_runs(profile: Profile, *, runs: int, scheduled: int) -> list[str]:
    """What did not work in the profile: runs that did not succeed, pipelines not crawled."""
    problems = []
    if profile.fired["succeeded"] != runs:
        problems.append(f"(a) {profile.name}: {profile.fired['succeeded']} of {runs} runs succeeded")
    if profile.batched["succeeded"] != profile.batched["runs"]:
        problems.append(
            f"(b) {profile.name}: {profile.batched['succeeded']} of {profile.batched['runs']} runs succeeded"
        )
    if profile.batched["crawled"] != scheduled:
        problems.append(f"(b) {profile.name}: {profile.batched['crawled']} of {scheduled} pipelines were crawled")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=RUNS, help="pipelines fired by one event in (a)")
    parser.add_argument("--scheduled", type=int, default=SCHEDULED, help="pipelines falling due together in (b)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({SMOKE_RUNS} fired, {SMOKE_SCHEDULED} scheduled) that proves the bench works: exit 1 "
        "only when something did not work, whatever the figures",
    )
    parser.add_argument(
        "--parts",
        default="".join(PARTS),
        help=f"the parts to measure, e.g. `ab` or `e` (default: all, {''.join(PARTS)}): a full run of all takes about "
        "an hour on 2 cores",
    )
    args = parser.parse_args()
    if unknown := set(args.parts) - PARTS.keys():
        parser.error(f"--parts: no part {''.join(sorted(unknown))}; the parts are {''.join(PARTS)}")
    if args.smoke:
        args.runs, args.scheduled = SMOKE_RUNS, SMOKE_SCHEDULED
    elif args.runs < 1 or args.scheduled < 1:
        parser.error("--runs and --scheduled must be at least 1")
    require_services()

    n, m = args.runs, args.scheduled
    print(f"started {machine()}; {os.cpu_count()} cores")
    profiles = {}
    if PROFILE_PARTS & set(args.parts):
        with served_corpus(pages=n + m, min_bytes=50 * KiB, seed=SEED) as (_server, urls):
            for name in (TODAY, CELERY):
                profiles[name] = measure_profile(name, urls, runs=n, scheduled=m)
                print(f"measured the {name} profile by {machine()}", flush=True)
    bench = Bench(args=args, profiles=profiles)
    for profile in profiles.values():
        bench.failures.extend(check_runs(profile, runs=n, scheduled=m))
    figures = []
    for key in args.parts:
        figures.extend(PARTS[key](bench))
        print(f"measured part ({key}) by {machine()}", flush=True)
    if profiles:
        print(
            f"PostgreSQL storage in both profiles; pages of 50 KiB served on loopback; {n} fired, {m} scheduled "
            "pipelines"
        )
    for figure in figures:
        verdict = "" if figure.met is None else ("  ok" if figure.met else "  MISSED")
        target = f" (target {figure.target})" if figure.target else ""
        print(f"{figure.label}: {figure.value}{target}{verdict}")
        if figure.met is False and (figure.judged_in_smoke or not args.smoke):
            bench.failures.append(f"{figure.label} = {figure.value}, target {figure.target}")
    if args.smoke:
        print("targets not judged (smoke)")
    print("FAIL: " + "; ".join(bench.failures) if bench.failures else "PASS")
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
