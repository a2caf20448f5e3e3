"""What a run leaves in a Celery pool process is put back before the next run there: the process state is
taken as a task starts (Celery's task_prerun) and restored as it ends (task_postrun), with a WARNING naming
what the run had changed. A pool process executes up to 200 runs, one after another, in one interpreter."""

from __future__ import annotations

import gc
import importlib
import logging
from typing import Any

from pipelines_dagster.cli.process_state import ProcessState
from pipelines_dagster.core.crawl.extract.workers import keep_a_worker_between_crawls, kept_descriptors
from pipelines_dagster.core.run.engine import leave_the_collector_to_the_process

logger = logging.getLogger(__name__)
# The code location every run loads, imported before the first run of a pool process is watched: what its
# import sets (environment variables, loggers, warning filters) is the process's own, for every run.
CODE_LOCATION = "pipelines_dagster.definitions"

# Each task's process state as it started, and whether it is the process's first task.
_taken: dict[str, tuple[ProcessState, bool]] = {}
# What every Dagster run sets in its process (the Snowflake partner variable, its own logger, a SIGTERM handler for
# the run's interruption): put back after each run like the rest, without a warning that would fill the log.
EVERY_RUN_CHANGES = {"environment variables": {"SF_PARTNER"}, "loggers": {"dagster"}, "signal handlers": {"SIGTERM"}}
_code_location = CODE_LOCATION
# Whether this process has yet to start a task; a worker's pool processes are forked before their first.
_first_task = True


def _before_task(task_id: str, **_: Any) -> None:
    global _first_task
    first, _first_task = _first_task, False
    if first:
        # In this pool process, which runs one run after another.
        keep_a_worker_between_crawls()
        leave_the_collector_to_the_process()
        try:
            importlib.import_module(_code_location)
        except Exception:  # the run loads it too, and fails saying why, in Dagster where its user looks
            logger.exception("the code location %s did not load in this pool process", _code_location)
    # The first task opens the worker's own connections (result backend, broker) as it goes: they stay, and
    # are no run's, so its descriptors are not counted.
    _taken[task_id] = ProcessState(files=not first, kept=kept_descriptors), first


def _run_id(args: Any, kwargs: Any) -> str:
    """The run a task executes: its packed ExecuteRunArgs (dagster-celery passes them by keyword) name it."""
    for value in (*(args or ()), *(kwargs or {}).values()):
        run_id = value.get("run_id") if isinstance(value, dict) else None
        if isinstance(run_id, str):
            return run_id
    return "?"


def _after_task(task_id: str, task: Any, args: Any = (), kwargs: Any = None, **_: Any) -> None:
    taken = _taken.pop(task_id, None)
    if taken is None:
        return
    state, first = taken
    # What the run left in reference cycles (its instance, resources, event records) is freed now: in a process
    # this size the collector's full passes are rare, and until one comes each run's cycles add up like a leak.
    gc.collect()
    if first:
        # What is left after the first run (the code location, the warm instance, what they import) lives as long as
        # the process: frozen, the collections after each later run walk only what that run made, not the 300,000
        # objects of Dagster's and ours (0.2 CPU-s a pass, more than a one-page run's own work).
        gc.freeze()
    restored = state.restore()
    changed = {part: unusual for part, names in restored.items() if (unusual := _unusual(part, names))}
    if changed:
        logger.warning(
            "run %s (task %s %s) left this pool process changed; put back where possible: %s",
            _run_id(args, kwargs),
            task.name,
            task_id,
            "; ".join(f"{part}: {', '.join(names)}" for part, names in changed.items()),
        )


def _unusual(part: str, names: list[str]) -> list[str]:
    expected = EVERY_RUN_CHANGES.get(part, set())
    return [name for name in names if name not in expected]


def guard_pool_processes(*, code_location: str = CODE_LOCATION) -> None:
    """From now on, every task a worker of this process runs leaves its pool process as it found it, but for
    the one extraction worker a pool process keeps for its next run; the module `code_location` is imported
    before the first."""
    from celery import signals

    global _code_location
    _code_location = code_location
    signals.task_prerun.connect(_before_task, weak=False)
    signals.task_postrun.connect(_after_task, weak=False)
