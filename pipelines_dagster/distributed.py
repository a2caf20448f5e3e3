"""The Celery profile's run launcher: dagster-celery's CeleryRunLauncher, extended where 0.29.27 falls short.

deploy/dagster.celery.yaml names this class. Each run is still one Celery task that a `pipelines-dagster worker`
pool process executes whole; this subclass adds two things and nothing of a queue of its own:

- Routing. A run goes to the Celery queue its pipeline's `worker_queue` names (none: the launcher's default) at
  the Celery priority of its place in Dagster's run queue (`runs.celery_routing`), written to the run's tags
  before it is sent. A launch from the Dagster UI carries no tags of ours until its step starts, so the launcher
  reads the pipeline from its partition.
- A dead worker noticed. dagster-celery's health check reads only the task's state, which a worker that dies
  whole (its machine gone, every process killed) never updates: its runs would stay STARTED until their maximum
  runtime. Here a started task's worker must also answer Celery's ping; one that has not for WORKER_GONE_SECONDS
  has its runs failed by run monitoring, and run retries start them again on a worker that is alive. A ping
  that cannot be sent (the broker restarting) proves nothing, and fails no run.

And on the workers' side, the task that executes a run (`register_run_task`) is dagster-celery's, but on one
Dagster instance per pool process whose storage keeps its PostgreSQL connections: dagster-celery opens an
instance per run, and Dagster's PostgreSQL storage outside the webserver opens a connection per statement, over
a hundred for a one-page run.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from typing import Any

import dagster as dg
from dagster._cli.api import _execute_run_command_body
from dagster._core.events import EngineEventData
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import unpack_value
from dagster_celery.config import TASK_EXECUTE_JOB_NAME
from dagster_celery.launcher import CeleryRunLauncher, _get_run_priority
from dagster_celery.tags import DAGSTER_CELERY_QUEUE_TAG, DAGSTER_CELERY_TASK_ID_TAG
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import create_engine, session_factory
from pipelines_dagster.core.catalog.pipelines import pipeline_queues
from pipelines_dagster.runs import celery_routing, pipeline_ids_of
from pipelines_dagster.settings import load_settings

# How long a started run's worker may go without answering a ping before its runs are failed: three of run
# monitoring's 5-s polls, so a worker that missed one ping while busy is not taken for dead, and a dead one is
# noticed within WORKER_GONE_SECONDS + a poll + PING_TIMEOUT_SECONDS (about 21 s).
WORKER_GONE_SECONDS = 15.0
# A ping is sent to every worker at once and waits this long for their answers.
PING_TIMEOUT_SECONDS = 1.0
# One ping answers for every run checked in one monitoring poll.
PING_REUSE_SECONDS = 3.0
# A pool process's storage connections: one kept per storage, as many more as a run's threads need at once
# (closed when given back), each replaced after an hour, and no statement timeout (the webserver's 15 s bounds
# what a page asks; a run's own queries are bounded by its maximum runtime).
OVERFLOW_CONNECTIONS = 10
RECYCLE_SECONDS = 3600
NO_STATEMENT_TIMEOUT = 0
# Brokers whose lowest Celery priority goes first.
LOWEST_FIRST_SCHEMES = ("redis", "rediss", "sentinel")


class WorkerLiveness:
    """Which workers answer pings, and since when one has not.

    `ping` returns the names of the workers that answered, or None when no ping could be sent. A worker counts
    as gone once it has been missing from every answer for `grace` seconds; the first answer after a failed ping
    starts its count again."""

    def __init__(
        self,
        ping: Callable[[], set[str] | None],
        *,
        grace: float = WORKER_GONE_SECONDS,
        reuse: float = PING_REUSE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ping, self._grace, self._reuse, self._clock = ping, grace, reuse, clock
        self._lock = threading.Lock()
        self._answered: set[str] | None = None
        self._pinged_at = float("-inf")
        self._missing_since: dict[str, float] = {}

    def silent_for(self, worker: str) -> float | None:
        """How long `worker` has not answered once it counts as gone; None while it may be alive."""
        with self._lock:
            now = self._clock()
            if now - self._pinged_at >= self._reuse:
                self._answered, self._pinged_at = self._ping(), now
                if self._answered is None:
                    # Nothing was learned: no worker's silence counts across a ping that was not sent.
                    self._missing_since.clear()
            if self._answered is None or worker in self._answered:
                self._missing_since.pop(worker, None)
                return None
            silent = now - self._missing_since.setdefault(worker, now)
            return silent if silent >= self._grace else None


class PipelinesCeleryRunLauncher(CeleryRunLauncher):
    """dagster-celery's CeleryRunLauncher with per-pipeline routing and a check that a run's worker is alive."""

    @cached_property
    def _sessions(self) -> sessionmaker[Session]:
        return session_factory(create_engine(load_settings().resolved_database_url))

    @cached_property
    def _liveness(self) -> WorkerLiveness:
        return WorkerLiveness(self._answering_workers)

    @property
    def _lowest_first(self) -> bool:
        return (self.broker or "").split(":", 1)[0].lower() in LOWEST_FIRST_SCHEMES

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        routing = celery_routing(run.tags, queue=self._queue_of(run.tags), lowest_first=self._lowest_first)
        if routing:
            self._instance.add_run_tags(run.run_id, routing)
            run = run.with_tags({**run.tags, **routing})
        super().launch_run(LaunchRunContext(dagster_run=run, workspace=context.workspace))

    def _queue_of(self, tags: Mapping[str, str]) -> str | None:
        """The queue the run's pipelines name, when they name one and the same (a batch run's members may not)."""
        pipeline_ids = pipeline_ids_of(tags)
        if not pipeline_ids:
            return None
        with self._sessions() as session:
            queues = pipeline_queues(session, pipeline_ids)
        named = {queues.get(pipeline_id) for pipeline_id in pipeline_ids}
        return named.pop() if len(named) == 1 else None

    def _launch_celery_task_run(self, run: dg.DagsterRun, task_signature: Any, routing_key: str) -> None:
        """dagster-celery's, with one change: the run's task id is written to the run before the task is sent, not
        after. A warm worker starts a one-page run, and may end it, within the daemon's time between the two, and run
        monitoring (or a reader of the run) found a started or ended run with no task to ask about."""
        queue = run.tags.get(DAGSTER_CELERY_QUEUE_TAG, self.default_queue)
        self._instance.report_engine_event("Creating Celery run worker job task", run, cls=self.__class__)
        task_id = str(uuid.uuid4())
        self._instance.add_run_tags(run.run_id, {DAGSTER_CELERY_TASK_ID_TAG: task_id})
        task_signature.apply_async(
            task_id=task_id, priority=_get_run_priority(run), queue=queue, routing_key=f"{queue}.{routing_key}"
        )
        self._instance.report_engine_event(
            "Celery task has been forwarded to the broker.",
            run,
            EngineEventData({"Run ID": run.run_id, "Celery Task ID": task_id, "Celery Queue": queue}),
            cls=self.__class__,
        )

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        task_id = run.tags.get(DAGSTER_CELERY_TASK_ID_TAG)
        if task_id is None:  # being launched: the tag is written just before the task is sent
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no Celery task sent yet")
        try:
            meta: Mapping[str, Any] = self.celery.backend.get_task_meta(task_id)
        except Exception as exc:
            # The result backend out of reach says nothing of the run: it is left running, and asked again.
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"task state unreadable ({type(exc).__name__}: {exc})")
        state, worker = meta.get("status"), meta.get("worker")
        if state == "SUCCESS":
            return CheckRunHealthResult(WorkerStatus.SUCCESS)
        if state == "FAILURE":
            return CheckRunHealthResult(WorkerStatus.FAILED, f"Celery task failed on {worker}: {meta.get('result')!r}")
        if state != "STARTED":
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, f"Unknown task status: {state}")
        silent = self._liveness.silent_for(worker) if worker else None
        if silent is not None:
            return CheckRunHealthResult(
                WorkerStatus.FAILED,
                f"Celery worker {worker} has not answered a ping for {silent:.0f} s: it is gone with the run",
            )
        return CheckRunHealthResult(WorkerStatus.RUNNING)

    def _answering_workers(self) -> set[str] | None:
        try:
            answers: Iterable[Mapping[str, Any]] = self.celery.control.ping(timeout=PING_TIMEOUT_SECONDS)
        except Exception:
            return None
        return {name for answer in answers for name in answer}


_process_instance: dg.DagsterInstance | None = None


def process_instance() -> dg.DagsterInstance:
    """This pool process's Dagster instance ($DAGSTER_HOME's), its storage connections pooled; made by its first
    run, after the pool process was forked, and kept for the runs after it."""
    global _process_instance
    if _process_instance is None:
        instance = dg.DagsterInstance.get()
        instance.optimize_for_webserver(
            statement_timeout=NO_STATEMENT_TIMEOUT, pool_recycle=RECYCLE_SECONDS, max_overflow=OVERFLOW_CONNECTIONS
        )
        _process_instance = instance
    return _process_instance


def register_run_task(app: Any) -> None:
    """The task the launcher sends each run as (dagster-celery's name and arguments), on the worker's app: it
    executes the run in this pool process as dagster-celery's does, on the process's instance."""

    @app.task(bind=True, name=TASK_EXECUTE_JOB_NAME, track_started=True)  # type: ignore[untyped-decorator]
    def execute_job(_task: Any, execute_job_args_packed: Any) -> int:
        args = unpack_value(val=execute_job_args_packed, as_type=ExecuteRunArgs)
        return _execute_run_command_body(
            instance=process_instance(),
            run_id=args.run_id,
            write_stream_fn=lambda _event: None,
            set_exit_code_on_failure=args.set_exit_code_on_failure is not False,
        )
