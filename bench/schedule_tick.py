"""One schedule-sensor evaluation over 10,000 and 100,000 scheduled pipelines, 2,000 of them due.

Prints the time of the evaluation that claims, advances and builds run requests
for all 2,000 (launching excluded; fires due together are grouped into batch runs
of the default size), and the ratio 100,000/10,000.
Targets: under 2 s at 10,000; ratio at most 1.5.

`--smoke` does the same over 200 and 400 pipelines, 50 of them due: it prints the same figures and
exits 1 only when a tick does not fire exactly the pipelines due, whatever the timings.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import dagster as dg
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import create_engine
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import Connector, Pipeline, PipelineTrigger, Workspace
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.runs import batch_pipeline_ids
from pipelines_dagster.sensors.schedules import build_schedule_sensor
from pipelines_dagster.settings import Settings

ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
DUE = 2_000
SMOKE_SIZES, SMOKE_DUE = (200, 400), 50
CRONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 6 * * 1-5", "15,45 * * * *"]
ZONES = ["UTC", "Europe/Stockholm", "America/New_York", "Asia/Tokyo"]


def fill(engine: sa.Engine, total: int, now: datetime, *, due: int) -> None:
    """`total` pipelines with one schedule trigger each; `due` of them due now, the rest later."""
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE workspaces, connectors, pipelines, pipeline_triggers RESTART IDENTITY CASCADE"))
        workspace_id = conn.execute(
            sa.insert(Workspace).values(name="bench", owner_user_id="u", created_at=now).returning(Workspace.id)
        ).scalar_one()
        # Schedules fire only pipelines over a connector.
        connector_id = conn.execute(
            sa.insert(Connector)
            .values(
                workspace_id=workspace_id,
                name="web",
                connector_type="webcrawler",
                config={"INITIAL_URLS": ["https://example.com/"]},
                created_at=now,
            )
            .returning(Connector.id)
        ).scalar_one()
        for start in range(0, total, 10_000):
            count = min(10_000, total - start)
            ids = (
                conn.execute(
                    sa.insert(Pipeline).returning(Pipeline.id, sort_by_parameter_order=True),
                    [
                        {
                            "workspace_id": workspace_id,
                            "connector_id": connector_id,
                            "name": f"p{start + n}",
                            "save_to_kb": True,
                            "config": {},
                            "enabled": True,
                            "system_managed": False,
                            "created_at": now,
                            "updated_at": now,
                        }
                        for n in range(count)
                    ],
                )
                .scalars()
                .all()
            )
            conn.execute(
                sa.insert(PipelineTrigger),
                [
                    {
                        "workspace_id": workspace_id,
                        "pipeline_id": pipeline_id,
                        "kind": "schedule",
                        "cron": CRONS[(start + n) % len(CRONS)],
                        "timezone": ZONES[(start + n) % len(ZONES)],
                        "enabled": True,
                        "created_at": now,
                        "updated_at": now,
                        "next_fire_at": now - timedelta(seconds=1 + n % 50)
                        if start + n < due
                        else now + timedelta(minutes=5 + (start + n) % 600),
                    }
                    for n, pipeline_id in enumerate(ids)
                ],
            )
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE pipeline_triggers"))
        conn.execute(sa.text("ANALYZE pipelines"))


def one_tick(url: str, instance: dg.DagsterInstance) -> tuple[float, int, int]:
    """(seconds, pipelines fired, runs requested) of one tick with the default run batch size."""
    sensor = build_schedule_sensor(Settings(schedule_batch_size=500))
    with dg.build_sensor_context(
        instance=instance, instance_ref=instance.get_ref(), resources={"app_db": AppDatabaseResource(url=url)}
    ) as context:
        started = time.perf_counter()
        result = sensor(context)
        seconds = time.perf_counter() - started
    fired = sum(len(batch_pipeline_ids(request.tags)) or 1 for request in result.run_requests)
    return seconds, fired, len(result.run_requests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs=2, default=[10_000, 100_000])
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({' and '.join(map(str, SMOKE_SIZES))} pipelines, {SMOKE_DUE} due) that proves the bench "
        "works: exit 1 only when a tick fires the wrong pipelines, whatever the timings",
    )
    args = parser.parse_args()
    sizes, due = (SMOKE_SIZES, SMOKE_DUE) if args.smoke else (tuple(args.sizes), DUE)
    name = f"bench_ticks_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    timings = {}
    try:
        engine = create_engine(url)
        upgrade(engine)
        with dg.instance_for_test() as instance:
            for total in sizes:
                now = datetime.now(UTC)
                started = time.perf_counter()
                fill(engine, total, now, due=due)
                print(f"{total:>7} pipelines: filled in {time.perf_counter() - started:.1f} s")
                # Warm the engine's pool and imports outside the timed tick.
                with engine.connect() as conn:
                    conn.execute(sa.text("SELECT 1"))
                seconds, fired, runs = one_tick(url, instance)
                if fired != due:
                    print(f"FAIL: the tick fired {fired} pipelines, expected {due}")
                    return 1
                timings[total] = seconds
                print(f"{total:>7} pipelines: one tick fired {fired} pipelines in {runs} runs in {seconds:.3f} s")
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    small, large = sizes
    ratio = timings[large] / timings[small]
    ok = timings[small] < 2.0 and ratio <= 1.5
    print(f"tick at {small}: {timings[small]:.3f} s (target < 2 s); ratio {large}/{small}: {ratio:.2f} (target <= 1.5)")
    if args.smoke:
        print("PASS: every tick fired the pipelines due (targets not judged: smoke)")
        return 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
