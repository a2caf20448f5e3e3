"""`pipelines-dagster worker`: a Celery worker that executes this code location's runs, as the Celery profile
(deploy/dagster.celery.yaml) launches them through dagster-celery's CeleryRunLauncher."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from pipelines_dagster.cli.common import user_errors
from pipelines_dagster.cli.worker_pool import guard_pool_processes
from pipelines_dagster.core.crawl.crawler import usable_cores
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import validate_queue_name
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import WORKER_NAME_ENV, Settings, load_settings

if TYPE_CHECKING:
    from celery import Celery

CELERY_PROFILE = "deploy/dagster.celery.yaml"
# A pool process is replaced after this many runs, so whatever runs leave behind in it (memory the allocator
# keeps, a cache that only grows) lives that long at most, for one fork and one import of the code location
# per 200 runs.
MAX_TASKS_PER_CHILD = 200
DEFAULT_NAME = "pipelines"
# How Dagster says an instance config names a variable that is not set.
UNSET_VARIABLE = re.compile(r'environment variable "([^"]+)" which is not set')


def node_name(name: str) -> str:
    """Celery's node name for `--name`: NAME@HOST, the host this machine's name (as Celery's %h) unless given."""
    return name if "@" in name else f"{name}@{socket.gethostname()}"


def worker_argv(*, queues: Sequence[str], concurrency: int, name: str) -> list[str]:
    """The `celery worker` arguments of a worker on `queues` with `concurrency` pool processes, named `name`.

    Prefork: a run executes in a pool process, so a run whose process dies (killed, out of memory) leaves the
    worker, which forks another. One message prefetched per pool process, as `dagster-celery worker start`
    has it: besides the runs it executes, a worker holds back at most one waiting run per pool process from
    the other workers."""
    return [
        "worker",
        f"--queues={','.join(queues)}",
        "--pool=prefork",
        f"--concurrency={concurrency}",
        f"--max-tasks-per-child={MAX_TASKS_PER_CHILD}",
        "--prefetch-multiplier=1",
        f"--hostname={node_name(name)}",
        "--loglevel=INFO",
    ]


def _queue_names(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    # The rule a pipeline's worker_queue passes, so every queue a run can be sent to is one a worker can take.
    for queue in value:
        try:
            validate_queue_name(queue)
        except InvalidInputError as exc:
            raise click.BadParameter(exc.message) from None
    return value


def _worker_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value or any(char.isspace() for char in value) or value.count("@") > 1 or value.startswith("@"):
        raise click.BadParameter(f"{value!r} is not a worker name: give NAME or NAME@HOST, without spaces")
    return value


def config_problem(messages: Sequence[str]) -> str:
    """What Dagster's errors loading an instance config come to, in a sentence: the variables to set, when that
    is what they say (each with a stack trace of the check that read it), else their first lines."""
    unset = [found.group(1) for message in messages if (found := UNSET_VARIABLE.search(message))]
    if unset:
        return f"set {' and '.join(unset)}, which its dagster.yaml reads"
    return " ".join(message.strip().splitlines()[0] for message in messages if message.strip())


def launcher_app(settings: Settings) -> tuple[Celery, str]:
    """The Celery app the instance's CeleryRunLauncher sends runs with (its broker, result backend and settings),
    with the task that executes a run registered on it, and the launcher's default queue. Refused, saying what to
    do, when dagster-celery is not installed or the instance launches runs otherwise."""
    try:
        from dagster_celery.launcher import CeleryRunLauncher

        from pipelines_dagster.distributed import register_run_task
    except ImportError:
        raise click.ClickException(
            "the worker needs dagster-celery: install the `distributed` extra (pip install 'pipelines-dagster"
            "[distributed]', or `make install-dev` in the checkout)"
        ) from None
    import dagster as dg

    try:
        instance = dagster_instance(settings)
        try:
            launcher: Any = instance.run_launcher
        finally:
            # Nothing of the instance stays open in the worker's main process for its pool processes to
            # inherit: each run opens the instance itself.
            instance.dispose()
    except dg.DagsterInvalidConfigError as exc:
        raise click.ClickException(
            f"cannot load the Dagster instance at {os.environ['DAGSTER_HOME']}: {config_problem(exc.error_messages)}"
        ) from None
    if not isinstance(launcher, CeleryRunLauncher):
        raise click.ClickException(
            f"the Dagster instance at {os.environ['DAGSTER_HOME']} launches runs with "
            f"{type(launcher).__name__}, not dagster-celery's CeleryRunLauncher, so no run would reach this "
            f"worker: copy {CELERY_PROFILE} to $DAGSTER_HOME/dagster.yaml (for the daemon and webserver too) and set "
            "PIPELINES_CELERY_BROKER_URL and PIPELINES_CELERY_BACKEND_URL"
        )
    register_run_task(launcher.celery)
    return launcher.celery, launcher.default_queue


@click.command("worker")
@click.option(
    "--queue",
    "queues",
    multiple=True,
    callback=_queue_names,
    help="A queue to take runs from; repeat for several. Default: the run launcher's default_queue "
    f"({CELERY_PROFILE}: pipelines), where every run goes unless its dagster-celery/queue tag names another.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 512),
    default=None,
    help="Pool processes, each executing one run at a time. Default: the cores this process may use.",
)
@click.option(
    "--name",
    default=DEFAULT_NAME,
    show_default=True,
    callback=_worker_name,
    help="The worker's name; Celery calls it NAME@HOST. Give each worker on one machine a name of its own.",
)
@user_errors
def worker(queues: tuple[str, ...], concurrency: int | None, name: str) -> None:
    """Execute this code location's runs on a Celery worker, as the Celery profile launches them.

    Reads the Dagster instance at $DAGSTER_HOME, which must be deploy/dagster.celery.yaml's: its broker
    ($PIPELINES_CELERY_BROKER_URL), result backend ($PIPELINES_CELERY_BACKEND_URL) and PostgreSQL storage
    ($DAGSTER_PG_URL). Runs read the PIPELINES_* settings of this process, as a run started by the daemon
    reads the daemon's: set them as for the daemon. Runs as long as it is not stopped; SIGTERM lets the runs
    under way finish first.
    """
    settings = load_settings()
    settings.require_deployment()
    app, default_queue = launcher_app(settings)
    guard_pool_processes()
    argv = worker_argv(queues=queues or (default_queue,), concurrency=concurrency or usable_cores(), name=name)
    # The pool processes, forked from this one, record the worker on each crawl they run (crawl_results' `worker`).
    os.environ[WORKER_NAME_ENV] = node_name(name)
    # app.start, not app.worker_main, which drops the worker's exit code.
    if exit_code := app.start(argv=argv):
        raise SystemExit(exit_code)
