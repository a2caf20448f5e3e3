"""Time `RunHistory.list_runs(limit=20)` for one pipeline on a PostgreSQL-backed Dagster instance
at 1,000 and 10,000 runs.

Runs are written with Dagster's own storage APIs as a deployment would have them: 100 hourly
pipelines in 10 workspaces, each run with its start/end events, crawl_results and kb_documents
materializations, and for a refused run the RUN_FAILURE event carrying its step failure.

`--smoke` does the same at 100 and 300 runs with 20 samples: it prints the same figures and exits 1
only when a page of runs does not hold the runs it should, whatever the timings.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import sqlalchemy as sa
from dagster._core.events import JobFailureData, RunFailureReason, StepMaterializationData
from dagster._core.execution.plan.objects import ErrorSource, StepFailureData, UserFailureData
from dagster._utils.error import SerializableErrorInfo

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import create_engine, session_factory, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.crawl_metadata import CrawlMetadata
from pipelines_dagster.history import RunHistory
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.runs import PARTITION_TAG, run_tags

ADMIN_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
WORKSPACES = 10
PIPELINES_PER_WORKSPACE = 10
SIZES = (1_000, 10_000)
SMOKE_SIZES = (100, 300)
# Every pipeline runs hourly, so the 100 pipelines start a run every 36 seconds.
RUN_SPACING_SECONDS = 36.0
SAMPLES = 200
SMOKE_SAMPLES = 20
PAGE_LIMIT = 20
P50_TARGET_MS = 100.0
RATIO_TARGET = 2.0
SEED = 20261201


@contextmanager
def fresh_databases(admin_url: str, *names: str) -> Iterator[list[str]]:
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in names:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield [sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False) for name in names]
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def postgres_instance(home: Path, url: str, *, pooled: bool = False) -> dg.DagsterInstance:
    """The instance `DagsterInstance.from_config` makes; `pooled` holds connections open as dagster-webserver does.

    dagster-postgres opens a connection per statement unless told otherwise (NullPool).
    """
    (home / "dagster.yaml").write_text(
        f"storage:\n  postgres:\n    postgres_url: {url}\ntelemetry:\n  enabled: false\n"
    )
    instance = dg.DagsterInstance.from_config(str(home))
    if pooled:
        instance.optimize_for_webserver(statement_timeout=15_000, pool_recycle=3600, max_overflow=20)
    return instance


def seed_catalog(sessions, instance: dg.DagsterInstance) -> list[tuple[int, int, str]]:
    """(workspace id, pipeline id, partition key) of every pipeline, registered as a partition like the API does."""
    pipelines = []
    with transaction(sessions) as session:
        for w in range(WORKSPACES):
            workspace = create_workspace(session, name=f"workspace {w}", owner_user_id=f"owner-{w}").workspace
            for p in range(PIPELINES_PER_WORKSPACE):
                connector = create_connector(
                    session,
                    workspace_id=workspace.id,
                    connector_type="webcrawler",
                    urls=[f"https://docs{w}.example.com/{p}/"],
                )
                pipeline = services.create_pipeline(
                    session,
                    instance,
                    workspace_id=workspace.id,
                    connector_id=connector.id,
                    name=f"Docs {w}.{p}",
                    folder_name="Docs",
                )
                pipelines.append((workspace.id, pipeline.id, pipeline.partition))
    return pipelines


def event(
    run: dg.DagsterRun,
    timestamp: float,
    event_type: dg.DagsterEventType,
    *,
    step_key: str | None = None,
    data=None,
    message: str | None = None,
) -> dg.EventLogEntry:
    return dg.EventLogEntry(
        error_info=None,
        level=logging.INFO,
        user_message="",
        run_id=run.run_id,
        timestamp=timestamp,
        step_key=step_key,
        job_name=run.job_name,
        dagster_event=dg.DagsterEvent(
            event_type.value, job_name=run.job_name, step_key=step_key, event_specific_data=data, message=message
        ),
    )


def materialized(
    run: dg.DagsterRun, timestamp: float, asset: dg.AssetKey, key: str, metadata: dict[str, dg.RawMetadataValue]
) -> dg.EventLogEntry:
    materialization = dg.AssetMaterialization(asset_key=asset, partition=key, metadata=metadata)
    return event(
        run,
        timestamp,
        dg.DagsterEventType.ASSET_MATERIALIZATION,
        step_key=asset.to_user_string(),
        data=StepMaterializationData(materialization),
    )


def refusal(run: dg.DagsterRun, pipeline_id: int) -> JobFailureData:
    reason = f"pipeline {pipeline_id} is disabled; enable it before running it"
    error = SerializableErrorInfo(f"dagster._core.definitions.events.Failure: {reason}\n", [], "Failure")
    step_failure = dg.DagsterEvent(
        dg.DagsterEventType.STEP_FAILURE.value,
        job_name=run.job_name,
        step_key="crawl_results",
        event_specific_data=StepFailureData(
            error, UserFailureData("intentional-failure", reason), ErrorSource.USER_CODE_ERROR
        ),
    )
    return JobFailureData(error, RunFailureReason.STEP_FAILURE, first_step_failure_event=step_failure)


def add_runs(
    instance: dg.DagsterInstance,
    pipelines: list[tuple[int, int, str]],
    numbers: range,
    *,
    start: float,
    rng: random.Random,
) -> None:
    """Runs `numbers` of the timeline: 90% succeed, 6% are refused, 4% are canceled mid-crawl."""
    crawls, documents = [], []
    for number in numbers:
        workspace_id, pipeline_id, key = pipelines[number % len(pipelines)]
        created = start + number * RUN_SPACING_SECONDS
        trigger = "scheduled" if number % 7 else "manual"
        run = dg.DagsterRun(
            job_name=pipeline_run.name,
            run_id=str(uuid.uuid4()),
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags={
                **run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=trigger),
                PARTITION_TAG: key,
            },
        )
        instance.run_storage.add_historical_run(run, datetime.fromtimestamp(created, UTC))
        instance.handle_new_event(event(run, created + 2, dg.DagsterEventType.RUN_START))
        fate = rng.random()
        if fate < 0.06:
            instance.handle_new_event(
                event(
                    run,
                    created + 3,
                    dg.DagsterEventType.RUN_FAILURE,
                    data=refusal(run, pipeline_id),
                    message='Execution of run for "pipeline_run" failed.',
                )
            )
            continue
        if fate < 0.10:
            instance.handle_new_event(event(run, created + 10, dg.DagsterEventType.RUN_CANCELED))
            continue
        attempted = rng.randint(5, 40)
        failed = rng.randint(0, 2)
        crawl = CrawlMetadata(
            pipeline_id=pipeline_id,
            workspace_id=workspace_id,
            urls_attempted=attempted,
            urls_succeeded=attempted - failed,
            urls_empty=0,
            urls_failed=failed,
            urls_unchanged=0,
            bytes=attempted * 20_000,
            blob_key=f"runs/{pipeline_id}/{run.run_id}/result.jsonl",
            blob_url=f"file:///blobs/runs/{pipeline_id}/{run.run_id}/result.jsonl",
            charged_micros=attempted * 1000,
            started_at=created + 3,
            duration_seconds=17.5,
        )
        crawls.append(
            materialized(
                run,
                created + 20,
                crawl_results.key,
                key,
                {
                    **crawl.to_metadata(),
                    "failed_urls": dg.MetadataValue.md("| URL | reason |\n|---|---|"),
                },
            )
        )
        documents.append(
            materialized(
                run,
                created + 25,
                kb_documents.key,
                key,
                {
                    "documents_created": rng.randint(0, 3),
                    "documents_updated": rng.randint(0, 5),
                    "documents_unchanged": attempted - failed,
                    "documents_failed": failed,
                },
            )
        )
        instance.handle_new_event(event(run, created + 30, dg.DagsterEventType.RUN_SUCCESS))
        if len(crawls) >= 200:
            flush(instance, crawls, documents)
    flush(instance, crawls, documents)


def flush(instance: dg.DagsterInstance, *batches: list[dg.EventLogEntry]) -> None:
    # One batch per asset: a batch updates the asset's own row from its last event.
    for batch in batches:
        if batch:
            instance.event_log_storage.store_event_batch(batch)
            batch.clear()


def timed(history: RunHistory, workspace_id: int, pipeline_id: int, *, count: int) -> tuple[float, float, int]:
    """(p50, p90) in milliseconds of `count` calls of list_runs(limit=20) for the pipeline, and the runs
    on the page."""
    for _ in range(10):
        history.list_runs(workspace_id, pipeline_id=pipeline_id, limit=PAGE_LIMIT)
    samples = []
    for _ in range(count):
        began = time.perf_counter()
        page = history.list_runs(workspace_id, pipeline_id=pipeline_id, limit=PAGE_LIMIT)
        samples.append((time.perf_counter() - began) * 1000)
    deciles = statistics.quantiles(samples, n=10)
    return statistics.median(samples), deciles[8], len(page.runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-url", default=ADMIN_URL, help="PostgreSQL URL allowed to create databases")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({' and '.join(map(str, SMOKE_SIZES))} runs, {SMOKE_SAMPLES} samples) that proves the "
        "bench works: exit 1 only when a page of runs comes out wrong, whatever the timings",
    )
    args = parser.parse_args()
    sizes, samples = (SMOKE_SIZES, SMOKE_SAMPLES) if args.smoke else (SIZES, SAMPLES)
    logging.getLogger("dagster").setLevel(logging.WARNING)
    suffix = uuid.uuid4().hex[:8]
    rng = random.Random(SEED)
    databases = fresh_databases(args.admin_url, f"pd_bench_{suffix}_dagster", f"pd_bench_{suffix}_app")
    with databases as (dagster_url, app_url), tempfile.TemporaryDirectory() as home:
        # Seeding over held connections takes a minute instead of ten; it does not change what is measured.
        writer = postgres_instance(Path(home), dagster_url, pooled=True)
        instances = {
            "per-statement connections": postgres_instance(Path(home), dagster_url),
            "pooled, as in dagster-webserver": postgres_instance(Path(home), dagster_url, pooled=True),
        }
        engine = create_engine(app_url)
        try:
            upgrade(engine)
            sessions = session_factory(engine)
            pipelines = seed_catalog(sessions, writer)
            measured = len(pipelines) // 3
            workspace_id, pipeline_id, _ = pipelines[measured]
            start = time.time() - sizes[-1] * RUN_SPACING_SECONDS
            results: dict[tuple[str, int], float] = {}
            wrong_pages = []
            made = 0
            for size in sizes:
                began = time.perf_counter()
                add_runs(writer, pipelines, range(made, size), start=start, rng=rng)
                made = size
                print(
                    f"{size:,} runs across {len(pipelines)} pipelines in {WORKSPACES} workspaces "
                    f"(seeded in {time.perf_counter() - began:.1f} s)"
                )
                # Runs go to the pipelines in turn, so the pipeline measured has every len(pipelines)-th.
                expected = min(PAGE_LIMIT, len(range(measured, size, len(pipelines))))
                for label, instance in instances.items():
                    p50, p90, on_page = timed(RunHistory(instance, sessions), workspace_id, pipeline_id, count=samples)
                    results[label, size] = p50
                    print(
                        f"  list_runs(pipeline_id={pipeline_id}, limit={PAGE_LIMIT}), {label}: "
                        f"p50 {p50:6.2f} ms  p90 {p90:6.2f} ms  ({on_page} runs on the page, {samples} samples)"
                    )
                    if on_page != expected:
                        wrong_pages.append(f"{label} at {size:,} runs: {on_page} runs on the page, expected {expected}")
        finally:
            for instance in [writer, *instances.values()]:
                instance.dispose()
            engine.dispose()
    missed = []
    for label in instances:
        small, large = results[label, sizes[0]], results[label, sizes[-1]]
        ratio = large / small
        print(
            f"{label}: p50 at {sizes[-1]:,} runs {large:.2f} ms (target < {P50_TARGET_MS:.0f} ms), "
            f"p50 ratio {sizes[-1]:,}/{sizes[0]:,} {ratio:.2f} (target <= {RATIO_TARGET})"
        )
        missed += [
            f"{what} ({label})"
            for what, ok in (("p50", large < P50_TARGET_MS), ("ratio", ratio <= RATIO_TARGET))
            if not ok
        ]
    if wrong_pages:
        print("FAILED: " + "; ".join(wrong_pages))
    if args.smoke:
        print("targets not judged (smoke)")
    else:
        print("MISSED: " + ", ".join(missed) if missed else "targets met")
    return 1 if wrong_pages or (missed and not args.smoke) else 0


if __name__ == "__main__":
    sys.exit(main())
