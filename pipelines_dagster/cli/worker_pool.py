"""What a run leaves in a Celery pool process is put back before the next run there: the process state is
taken as a task starts (Celery's task_prerun) and restored as it ends (task_postrun), with a WARNING naming
what the run had changed. A pool process executes up to 200 runs, one after another, in one interpreter."""

from __future__ import annotations

import gc
import importlib
import logging
from typing import Any

from pipelines_dagster.cli.process_state import ProcessState

logger = logging.getLogger(__name__)
# The code location every run loads, imported before the first run of a pool process is watched: what its
# import sets (environment variables, loggers, warning filters) is the process's own, for every run.
CODE_LOCATION = "pipelines_dagster.definitions"

_taken: dict[str, ProcessState] = {}
_code_location = CODE_LOCATION
# Whether this process has yet to start a task; a worker's pool processes are forked before their first.
_first_task = True


def _before_task(task_id: str, **_: Any) -> None:
    global _first_task
    first, _first_task = _first_task, False
    if first:
        try:
            importlib.import_module(_code_location)
        except Exception:  # the run loads it too, and fails saying why, in Dagster where its user looks
            logger.exception("the code location %s did not load in this pool process", _code_location)
    # The first task opens the worker's own connections (result backend, broker) as it goes: they stay, and
    # are no run's, so its descriptors are not counted.
    _taken[task_id] = ProcessState(files=not first)


def _run_id(args: Any, kwargs: Any) -> str:
    """The run a task executes: its packed ExecuteRunArgs (dagster-celery passes them by keyword) name it."""
    for value in (*(args or ()), *(kwargs or {}).values()):
        run_id = value.get("run_id") if isinstance(value, dict) else None
        if isinstance(run_id, str):
            return run_id
    return "?"


def _after_task(task_id: str, task: Any, args: Any = (), kwargs: Any = None, **_: Any) -> None:
    state = _taken.pop(task_id, None)
    if state is None:
        return
    # What the run left in reference cycles (its instance, resources, event records) is freed now: in a process
    # this size the collector's full passes are rare, and until one comes each run's cycles add up like a leak.
    gc.collect()
    if changed := state.restore():
        logger.warning(
            "run %s (task %s %s) left this pool process changed; put back where possible: %s",
            _run_id(args, kwargs),
            task.name,
            task_id,
            "; ".join(f"{part}: {', '.join(names)}" for part, names in changed.items()),
        )


def guard_pool_processes(*, code_location: str = CODE_LOCATION) -> None:
    """From now on, every task a worker of this process runs leaves its pool process as it found it; the
    module `code_location` is imported before the first."""
    from celery import signals

    global _code_location
    _code_location = code_location
    signals.task_prerun.connect(_before_task, weak=False)
    signals.task_postrun.connect(_after_task, weak=False)
