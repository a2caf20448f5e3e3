"""Per-run overhead, measured as a user waits for it: through the real daemon (`dagster dev` with
deploy/dagster.yaml, the embedded default) with two code locations side by side, in one run:

  (a) the floor: a trivial partitioned asset (bench/_floor.py, its own code location) fired for N
      partitions by a sensor, its step in the run's process: Dagster's own cost of a run here;
  (a') the same with Dagster's default executor (a subprocess per step), for reference only;
  (b) ours: N one-page KB pipelines, each over its own connector, fired by one domain event; timed
      from the event to the end of the last run;
  (c) one 2-page manual run launched through the webserver: RUN_START -> RUN_SUCCESS, and the crawl
      step inside it;
  (d) batching: M one-page KB pipelines whose schedules fall due at the same moment (as hourly
      schedules do at the top of the hour), run by the schedule sensor as pipeline_batch runs;
      pipeline crawls completed per minute, from the moment they fell due to the end of the last run.

(a) and (b) run in interleaved rounds and the best round of each counts: other work on a shared
machine only ever slows a round down.

Targets (issue 10): (b) >= 0.8 x (a) in runs per minute; (c) ends <= 3 s after it starts; (d) >= 3 x (a)
in pipeline crawls per minute. Exits 1 when a target is missed or a run or crawl did not succeed.

`--smoke` starts the same `dagster dev` and measures (a) to (d) but (a') with 2 runs, one round and 3 scheduled
pipelines: it prints the same figures and exits 1 only when a run or crawl did not succeed, whatever
the ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _corpus import (
    OUR_LOCATION,
    OUR_LOCATION_YAML,
    REPO,
    DagsterDev,
    EmbeddedHome,
    KiB,
    dagster_dev_parts,
    free_port,
    partitions_of,
    served_corpus,
    wait_for,
)

SEED = 20261201
RATIO_TARGET = 0.8
MANUAL_TARGET_SECONDS = 3.0
BATCHED_TARGET = 3.0
SMOKE_RUNS, SMOKE_SCHEDULED = 2, 3
# A schedule that never falls due by itself: the bench sets when it is due.
NEVER = "0 0 29 2 *"
LOCATIONS = (OUR_LOCATION, "floor")

WORKSPACE_YAML = f"""load_from:
{OUR_LOCATION_YAML}  - python_file:
      relative_path: {REPO / "bench" / "_floor.py"}
      working_directory: {REPO / "bench"}
      location_name: floor
"""


def cpu_snapshot(root_pid: int) -> dict[str, float]:
    """CPU seconds used so far by each part of a `dagster dev` tree. "runs" counts the finished run
    processes (and their extraction workers) of every code server, which reaps them."""
    import psutil

    parts: dict[str, float] = {}
    for part, process, _command in dagster_dev_parts(root_pid):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        name = "code servers" if part.startswith("code server") else part
        if name != "other":
            parts[name] = parts.get(name, 0.0) + times.user + times.system
        if part == "code server":
            parts["runs"] = parts.get("runs", 0.0) + times.children_user + times.children_system
    return parts


class CpuMeter:
    """CPU seconds each part of the `dagster dev` tree used between enter and exit."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid

    def __enter__(self) -> CpuMeter:
        self._start = cpu_snapshot(self.root_pid)
        return self

    def __exit__(self, *exc_info: object) -> None:
        end = cpu_snapshot(self.root_pid)
        self.parts = {name: end[name] - self._start.get(name, 0.0) for name in end}
        self.total = sum(self.parts.values())

    def describe(self, count: int, *, per: str = "run") -> str:
        detail = ", ".join(f"{name} {seconds / count:.2f}" for name, seconds in sorted(self.parts.items()) if seconds)
        return f"{self.total / count:.2f} CPU-s per {per} ({detail})"


class Deployment(DagsterDev):
    """`dagster dev` over both code locations on an embedded default (`_corpus.EmbeddedHome`), whose
    app database and Dagster instance this process shares."""

    def __init__(self, home: EmbeddedHome, trigger_file: Path) -> None:
        super().__init__(
            home, workspace_yaml=WORKSPACE_YAML, locations=LOCATIONS, sensors=("floor_sensor", "pipeline_events")
        )
        self.trigger_file = trigger_file


def seed_pipelines(
    deployment: Deployment,
    urls: list[str],
    *,
    pages_per_pipeline: int,
    count: int,
    event_type: str | None,
    name: str,
    scheduled: bool = False,
) -> tuple[int, list[int]]:
    """A workspace with `count` KB pipelines, each over its own connector of `pages_per_pipeline` URLs."""
    from pipelines_dagster import services
    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.core.catalog.connectors import create_connector
    from pipelines_dagster.core.catalog.schedules import ScheduleSpec
    from pipelines_dagster.core.catalog.triggers import create_event_trigger
    from pipelines_dagster.core.catalog.workspaces import create_workspace

    pipeline_ids = []
    with transaction(deployment.sessions) as session:
        workspace_id = create_workspace(session, name=name, owner_user_id=f"bench-{name}").workspace.id
        for number in range(count):
            chunk = urls[number * pages_per_pipeline : (number + 1) * pages_per_pipeline]
            connector = create_connector(
                session,
                workspace_id=workspace_id,
                connector_type="webcrawler",
                urls=chunk,
                name=f"{name} site {number}",
            )
            pipeline = services.create_pipeline(
                session,
                deployment.instance,
                workspace_id=workspace_id,
                connector_id=connector.id,
                name=f"{name} {number}",
                folder_name=f"{name} docs",
                schedule=ScheduleSpec(cron=NEVER, timezone="UTC") if scheduled else None,
            )
            if event_type is not None:
                create_event_trigger(session, workspace_id=workspace_id, pipeline_id=pipeline.id, event_type=event_type)
            pipeline_ids.append(pipeline.id)
    return workspace_id, pipeline_ids


def rate(count: int, started: float, records: list[Any]) -> tuple[float, float]:
    """(seconds from `started` to the end of the last run, runs per minute)."""
    seconds = max(record.end_time for record in records) - started
    return seconds, count / seconds * 60


def succeeded(records: list[Any]) -> int:
    import dagster as dg

    return sum(record.dagster_run.status == dg.DagsterRunStatus.SUCCESS for record in records)


def measure_floor(deployment: Deployment, count: int, *, job: str) -> dict[str, Any]:
    batch = uuid.uuid4().hex[:8]
    with CpuMeter(deployment.process.pid) as cpu:
        started = time.time()
        deployment.trigger_file.write_text(json.dumps({"batch": batch, "count": count, "job": job}))
        records = deployment.finished_runs({"floor_batch": batch}, count, timeout=60 * 30)
    seconds, per_minute = rate(count, started, records)
    return {"seconds": seconds, "per_minute": per_minute, "succeeded": succeeded(records), "cpu": cpu}


def measure_ours(deployment: DagsterDev, workspace_id: int, count: int) -> dict[str, Any]:
    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.core.triggers.events import emit_event

    with CpuMeter(deployment.process.pid) as cpu:
        started = time.time()
        with transaction(deployment.sessions) as session:
            event_id = emit_event(
                session,
                workspace_id=workspace_id,
                event_type="refresh.requested",
                payload={"reason": "run overhead bench"},
            ).id
        records = deployment.finished_runs({"event_id": str(event_id)}, count, timeout=60 * 30)
    seconds, per_minute = rate(count, started, records)
    return {
        "seconds": seconds,
        "per_minute": per_minute,
        "succeeded": succeeded(records),
        "cpu": cpu,
        "run_ids": [record.dagster_run.run_id for record in records],
    }


def measure_manual(deployment: Deployment, workspace_id: int, pipeline_id: int) -> dict[str, Any]:
    from pipelines_dagster.launch import launch_pipeline_run

    run_id = launch_pipeline_run(deployment.sessions, workspace_id=workspace_id, pipeline_id=pipeline_id)
    record = wait_for("the manual run to finish", lambda: _finished_record(deployment, run_id), timeout=300)
    steps = {stat.step_key: stat for stat in deployment.instance.get_run_step_stats(run_id)}
    crawl = steps.get("crawl_results")
    return {
        "succeeded": succeeded([record]),
        "run_seconds": record.end_time - record.start_time,
        "crawl_step_seconds": (crawl.end_time - crawl.start_time) if crawl and crawl.end_time else None,
        "steps": len(steps),
    }


def measure_batched(deployment: DagsterDev, workspace_id: int, pipeline_ids: list[int]) -> dict[str, Any]:
    import dagster as dg
    import sqlalchemy as sa

    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.app_db.models import PipelineTrigger
    from pipelines_dagster.batch import pipeline_batch
    from pipelines_dagster.runs import MEMBER, batch_pipeline_ids, member_workspace_tag

    count = len(pipeline_ids)

    def finished() -> list[Any] | None:
        records = deployment.instance.get_run_records(dg.RunsFilter(tags={member_workspace_tag(workspace_id): MEMBER}))
        covered = sum(len(batch_pipeline_ids(record.dagster_run.tags)) for record in records)
        return records if covered >= count and all(r.dagster_run.is_finished for r in records) else None

    with CpuMeter(deployment.process.pid) as cpu:
        due = time.time()
        with transaction(deployment.sessions) as session:
            session.execute(
                sa.update(PipelineTrigger)
                .where(PipelineTrigger.pipeline_id.in_(pipeline_ids))
                .values(next_fire_at=datetime.fromtimestamp(due, UTC))
            )
        records = wait_for(f"{count} scheduled pipelines to run", finished, timeout=60 * 30, every=0.5)
    seconds, per_minute = rate(count, due, records)
    first_run = min(record.create_timestamp.timestamp() for record in records)
    crawled = deployment.instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("crawl_results"),
            asset_partitions=list(partitions_of(deployment.sessions, pipeline_ids).values()),
            after_timestamp=due,
        ),
        limit=count * 2,
    ).records
    return {
        "seconds": seconds,
        "per_minute": per_minute,
        "cpu": cpu,
        "runs": len(records),
        "tick_latency": first_run - due,
        "batch_runs": sum(record.dagster_run.job_name == pipeline_batch.name for record in records),
        "succeeded": succeeded(records),
        "crawled": len({record.partition_key for record in crawled}),
    }


def _finished_record(deployment: Deployment, run_id: str) -> Any:
    import dagster as dg

    records = deployment.instance.get_run_records(dg.RunsFilter(run_ids=[run_id]))
    return records[0] if records and records[0].dagster_run.is_finished else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="runs in (a) and (b); at least 40")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds of (a) and (b), interleaved; the best of each counts"
    )
    parser.add_argument("--scheduled", type=int, default=240, help="pipelines falling due together in (d)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({SMOKE_RUNS} runs, one round, {SMOKE_SCHEDULED} scheduled pipelines) that proves the "
        "bench works: exit 1 only when a run or crawl does not succeed, whatever the ratios",
    )
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.rounds, args.scheduled = SMOKE_RUNS, 1, SMOKE_SCHEDULED
    elif args.runs < 40:
        parser.error("the issue asks for at least 40 runs")

    n, m = args.runs, args.scheduled
    with ExitStack() as stack:
        _server, urls = stack.enter_context(served_corpus(pages=n + 2 + m, min_bytes=50 * KiB, seed=SEED))
        trigger_file = Path(tempfile.mkdtemp(prefix="run-overhead-")) / "floor-trigger.json"
        stack.callback(shutil.rmtree, trigger_file.parent, ignore_errors=True)
        home = stack.enter_context(
            EmbeddedHome(PIPELINES_DAGSTER_URL=f"http://127.0.0.1:{free_port()}", FLOOR_TRIGGER_FILE=str(trigger_file))
        )
        deployment = Deployment(home, trigger_file)
        stack.callback(deployment.stop)
        deployment.start()
        # Every round of (b) fires new pipelines (a workspace each), so each run is a first crawl.
        workspaces = [
            seed_pipelines(
                deployment,
                urls[:n],
                pages_per_pipeline=1,
                count=n,
                event_type="refresh.requested",
                name=f"overhead {number}",
            )[0]
            for number in range(args.rounds)
        ]
        manual_workspace, [manual_pipeline] = seed_pipelines(
            deployment, urls[n : n + 2], pages_per_pipeline=2, count=1, event_type=None, name="manual"
        )
        scheduled_workspace, scheduled = seed_pipelines(
            deployment, urls[n + 2 :], pages_per_pipeline=1, count=m, event_type=None, name="scheduled", scheduled=True
        )
        print(
            f"dagster dev over 2 code locations, DAGSTER_HOME {deployment.home} (deploy/dagster.yaml), "
            f"pages of 50 KiB served on loopback; {n} runs in (a) and (b), {args.rounds} rounds, "
            f"{m} pipelines in (d)"
        )
        floors, ours = [], []
        for number, workspace_id in enumerate(workspaces, start=1):
            floor = measure_floor(deployment, n, job="floor_job")
            floors.append(floor)
            print(
                f"(a)  round {number}: floor, trivial asset, step in the run's process: {floor['per_minute']:5.1f} "
                f"runs/min ({n} runs in {floor['seconds']:.1f} s, {floor['succeeded']} succeeded, "
                f"{floor['cpu'].describe(n)})"
            )
            result = measure_ours(deployment, workspace_id, n)
            ours.append(result)
            print(
                f"(b)  round {number}: ours, one event -> {n} one-page KB pipelines: {result['per_minute']:5.1f} "
                f"runs/min ({n} runs in {result['seconds']:.1f} s, {result['succeeded']} succeeded, "
                f"{result['cpu'].describe(n)})"
            )
        # For reference only, so not in a smoke run, which proves the bench's judged paths work.
        default = None if args.smoke else measure_floor(deployment, n, job="floor_job_multiprocess")
        if default is not None:
            print(
                f"(a') the floor with Dagster's default executor (a subprocess per step): {default['per_minute']:5.1f} "
                f"runs/min ({n} runs in {default['seconds']:.1f} s, {default['cpu'].describe(n)}) [reference only]"
            )
        manual = measure_manual(deployment, manual_workspace, manual_pipeline)
        print(
            f"(c)  one 2-page manual run: RUN_START -> RUN_SUCCESS {manual['run_seconds']:.2f} s, crawl step "
            f"{manual['crawl_step_seconds']:.2f} s, {manual['steps']} steps"
        )
        batched = measure_batched(deployment, scheduled_workspace, scheduled)
        print(
            f"(d)  {m} one-page KB pipelines falling due together: {batched['per_minute']:5.1f} pipeline crawls/min "
            f"({batched['crawled']} crawled in {batched['seconds']:.1f} s, of which {batched['tick_latency']:.1f} s "
            f"before the schedule sensor's tick made the first run; {batched['runs']} runs, "
            f"{batched['batch_runs']} of them batch runs; {batched['cpu'].describe(m, per='pipeline')})"
        )

    # Other work on a shared machine only ever slows a round down: the fastest round of each is the truest.
    floor = max(floors, key=lambda result: result["per_minute"])
    best = max(ours, key=lambda result: result["per_minute"])
    ratio = best["per_minute"] / floor["per_minute"]
    batched_ratio = batched["per_minute"] / floor["per_minute"]
    failures = []
    if ratio < RATIO_TARGET and not args.smoke:
        failures.append(f"(b)/(a) = {ratio:.2f} is below {RATIO_TARGET}")
    if manual["run_seconds"] > MANUAL_TARGET_SECONDS and not args.smoke:
        failures.append(f"(c) took {manual['run_seconds']:.2f} s, over {MANUAL_TARGET_SECONDS:g} s")
    if batched_ratio < BATCHED_TARGET and not args.smoke:
        failures.append(f"(d)/(a) = {batched_ratio:.2f} is below {BATCHED_TARGET}")
    measured = [
        *(("(a)", result, n) for result in floors),
        *((("(a')", default, n),) if default is not None else ()),
        *(("(b)", result, n) for result in ours),
        ("(c)", manual, 1),
        ("(d)", batched, batched["runs"]),
    ]
    for name, result, expected in measured:
        if result["succeeded"] != expected:
            failures.append(f"{name}: {result['succeeded']} of {expected} runs succeeded")
    if batched["crawled"] != m:
        failures.append(f"(d): {batched['crawled']} of {m} pipelines were crawled")
    paired = ", ".join(f"{b['per_minute'] / a['per_minute']:.2f}" for a, b in zip(floors, ours, strict=True))
    print(
        f"best of {args.rounds} rounds: (a) {floor['per_minute']:.1f}, (b) {best['per_minute']:.1f} runs/min; "
        f"(b)/(a) = {ratio:.2f} (target >= {RATIO_TARGET}; each round's own: {paired}); "
        f"(d)/(a) = {batched_ratio:.2f} (target >= {BATCHED_TARGET})"
        + ("; targets not judged (smoke)" if args.smoke else "")
    )
    print("FAIL: " + "; ".join(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
