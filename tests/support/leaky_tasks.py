"""A Celery app whose tasks leave their pool process changed in every way `worker_pool` puts back, and one
that reports what it finds; its pool processes are guarded as `pipelines-dagster worker`'s are.

Run as `celery -A tests.support.leaky_tasks worker` with LEAKY_BROKER_URL set."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import warnings
from typing import Any

from celery import Celery

from pipelines_dagster.cli.worker_pool import guard_pool_processes

app = Celery("leaky", broker=os.environ.get("LEAKY_BROKER_URL"), backend="rpc://")
app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
guard_pool_processes(code_location="tests.support.leaky_location")

LEAKED_VARIABLE = "LEAKY_RUN_SECRET"
# What tests/support/leaky_location.py sets as it is imported: in the pool process, not in the worker.
LOCATION_VARIABLE = "LEAKY_LOCATION_LOADED"
LEAKED_LOGGER = "pipelines_dagster.leaky"
# The variable the worker was started with, which a run removes.
KEPT_VARIABLE = "LEAKY_KEPT"


# What a run keeps open past its end, as a module global would.
_LEFT_OPEN: list[Any] = []


def _on_usr1(number: int, frame: Any) -> None:
    """A handler a run installs."""


@app.task(name="leak")
def leak(execute_job_args_packed: dict[str, Any]) -> int:
    """Takes its run as dagster-celery's task does."""
    os.environ[LEAKED_VARIABLE] = "hunter2"
    os.environ["SF_PARTNER"] = "dagster"  # as every Dagster run does
    os.environ.pop(KEPT_VARIABLE, None)
    logging.getLogger(LEAKED_LOGGER).addHandler(logging.StreamHandler(sys.stderr))
    logging.getLogger(LEAKED_LOGGER).setLevel(logging.DEBUG)
    logging.getLogger().addHandler(logging.FileHandler(os.path.join(tempfile.gettempdir(), "leaky-run.log")))
    gc.disable()
    gc.set_threshold(1, 1, 1)
    signal.signal(signal.SIGUSR1, _on_usr1)
    os.chdir(tempfile.gettempdir())
    sys.path.append("/leaky/path")
    warnings.simplefilter("ignore")
    socket.setdefaulttimeout(3.0)
    threading.Thread(target=threading.Event().wait, name="leaky-thread", daemon=True).start()
    _LEFT_OPEN.append(open(os.devnull, "rb"))  # noqa: SIM115  # left open on purpose
    return os.getpid()


@app.task(name="observe")
def observe() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "location_loaded": os.environ.get(LOCATION_VARIABLE),
        "variables": sorted(name for name in os.environ if name.startswith(("LEAKY_", "SF_PARTNER"))),
        "logger_handlers": len(logging.getLogger(LEAKED_LOGGER).handlers),
        "logger_level": logging.getLogger(LEAKED_LOGGER).level,
        "root_handlers": [type(handler).__name__ for handler in logging.getLogger().handlers],
        "gc": [gc.isenabled(), list(gc.get_threshold())],
        "frozen": gc.get_freeze_count(),
        "sigusr1": getattr(signal.getsignal(signal.SIGUSR1), "__name__", str(signal.getsignal(signal.SIGUSR1))),
        "cwd": os.getcwd(),
        "leaky_path": "/leaky/path" in sys.path,
        "warning_filters": len(warnings.filters),
        "socket_timeout": socket.getdefaulttimeout(),
    }
