"""The instance configs in deploy/ load into real Dagster instances with the behaviour we rely on."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.events import JobFailureData, RunFailureReason
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.tags import WILL_RETRY_TAG
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon
from dagster_postgres import PostgresRunStorage

from tests.conftest import database_beside

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
PIPELINE_LIMIT = {"key": "pipeline_id", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
PARTITION_LIMIT = {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
CELERY_BROKER_URL = "amqp://guest:guest@mq.invalid:5672//"
CELERY_BACKEND_URL = "redis://cache.invalid:6379/1"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def dagster_database(postgres_url: str) -> Iterator[Callable[[str], str]]:
    """A database of its own for Dagster's storage under each instance config, made on first use, next to the app
    database on the same server.

    Dagster stamps its Alembic revision into the database it is given, so it cannot share the app database
    (which has its own `alembic_version`); nor can two configs share one, as the queue tests count its runs.
    """
    with ExitStack() as stack:
        made: dict[str, str] = {}

        def of(config_name: str) -> str:
            if config_name not in made:
                made[config_name] = stack.enter_context(database_beside(postgres_url, "dagster"))
            return made[config_name]

        yield of


@pytest.fixture(params=["dagster.yaml", "dagster.postgres.yaml", "dagster.celery.yaml"])
def config_name(request) -> str:
    return request.param


@pytest.fixture
def instance(
    config_name: str, request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dg.DagsterInstance]:
    """A real instance loaded the way the webserver and daemon load it: $DAGSTER_HOME/dagster.yaml."""
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(DEPLOY / config_name, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    if config_name != "dagster.yaml":
        monkeypatch.setenv("DAGSTER_PG_URL", request.getfixturevalue("dagster_database")(config_name))
    if config_name == "dagster.celery.yaml":
        # Read as the instance loads; the launcher connects to neither until it sends a run.
        monkeypatch.setenv("PIPELINES_CELERY_BROKER_URL", CELERY_BROKER_URL)
        monkeypatch.setenv("PIPELINES_CELERY_BACKEND_URL", CELERY_BACKEND_URL)
    with dg.DagsterInstance.get() as loaded:
        yield loaded


def test_runs_are_queued_one_per_pipeline(instance: dg.DagsterInstance) -> None:
    assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
    # Drained every second: a run a user starts waits at most that for its launch.
    assert instance.run_coordinator.dequeue_interval_seconds == 1
    run_queue = instance.get_concurrency_config().run_queue_config
    assert run_queue is not None
    assert PIPELINE_LIMIT in run_queue.tag_concurrency_limits
    assert PARTITION_LIMIT in run_queue.tag_concurrency_limits


def test_dequeue_holds_back_a_second_run_of_the_same_pipeline(instance: dg.DagsterInstance) -> None:
    # The queued-run daemon's own dequeue decision, on runs stored in this instance.
    origin = RemoteJobOrigin(
        repository_origin=RemoteRepositoryOrigin(
            code_location_origin=RegisteredCodeLocationOrigin("pipelines_dagster"),
            repository_name="__repository__",
        ),
        job_name="crawl",
    )

    def add_run(status: dg.DagsterRunStatus, pipeline_id: str, tag: str = "pipeline_id") -> dg.DagsterRun:
        return instance.add_run(
            dg.DagsterRun(
                job_name="crawl",
                status=status,
                tags={tag: pipeline_id},
                remote_job_origin=origin,
            )
        )

    add_run(dg.DagsterRunStatus.STARTED, "1")
    add_run(dg.DagsterRunStatus.QUEUED, "1")
    first_of_2 = add_run(dg.DagsterRunStatus.QUEUED, "2")
    add_run(dg.DagsterRunStatus.QUEUED, "2")
    # A launch from the UI has only the partition tag, and is held back all the same.
    add_run(dg.DagsterRunStatus.STARTED, "3", tag="dagster/partition")
    add_run(dg.DagsterRunStatus.QUEUED, "3", tag="dagster/partition")

    with QueuedRunCoordinatorDaemon(interval_seconds=1) as daemon:
        dequeued = daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), None)

    assert [run.run_id for run in dequeued] == [first_of_2.run_id]


def test_run_monitoring_fails_stuck_runs(instance: dg.DagsterInstance) -> None:
    assert instance.run_monitoring_enabled
    assert instance.run_monitoring_max_runtime_seconds == 2 * 60 * 60
    assert instance.run_monitoring_start_timeout_seconds == 300


def test_sensors_and_schedules_tick_in_threads(instance: dg.DagsterInstance) -> None:
    assert instance.get_sensor_settings()["use_threads"] is True
    assert instance.get_scheduler_settings()["use_threads"] is True


def test_telemetry_is_off(instance: dg.DagsterInstance) -> None:
    assert not instance.is_ephemeral
    assert instance.telemetry_enabled is False


@pytest.mark.parametrize("config_name", ["dagster.yaml"])
def test_embedded_storage_is_sqlite_under_dagster_home(instance: dg.DagsterInstance, tmp_path: Path) -> None:
    run = instance.add_run(dg.DagsterRun(job_name="crawl"))
    assert instance.get_run_by_id(run.run_id) is not None
    assert (tmp_path / "dagster-home" / "history" / "runs.db").is_file()


@pytest.mark.parametrize("config_name", ["dagster.postgres.yaml", "dagster.celery.yaml"])
def test_postgres_storage(instance: dg.DagsterInstance) -> None:
    assert isinstance(instance.run_storage, PostgresRunStorage)
    run = instance.add_run(dg.DagsterRun(job_name="crawl"))
    assert instance.get_run_by_id(run.run_id) is not None


@pytest.mark.parametrize("config_name", ["dagster.celery.yaml"])
def test_the_celery_profile_sends_runs_to_celery_workers_and_never_resumes_them(instance: dg.DagsterInstance) -> None:
    from pipelines_dagster.distributed import PipelinesCeleryRunLauncher

    launcher = instance.run_launcher
    # dagster-celery's CeleryRunLauncher, extended with routing and a ping of each run's worker.
    assert isinstance(launcher, PipelinesCeleryRunLauncher)
    assert (launcher.broker, launcher.backend, launcher.default_queue) == (
        CELERY_BROKER_URL,
        CELERY_BACKEND_URL,
        "pipelines",
    )
    # A task's stored state names the worker that ran it.
    assert launcher.celery.conf.result_extended is True
    assert launcher.celery.conf.worker_prefetch_multiplier == 1
    # A run sent while the broker restarts waits for it about a minute; a worker that loses it keeps its runs.
    for policy in (launcher.celery.conf.task_publish_retry_policy, launcher.celery.conf.broker_transport_options):
        assert policy["max_retries"] * policy["interval_max"] >= 60
    # Kombu gives up reconnecting after this long whatever the retries (default: the 4-s connect timeout).
    assert launcher.celery.conf.broker_transport_options["connect_retries_timeout"] >= 60
    assert launcher.celery.conf.worker_cancel_long_running_tasks_on_connection_loss is False
    # dagster-celery 0.29.27 resumes a run under a wrong argument name: a dead worker's run is retried instead.
    assert instance.run_monitoring_max_resume_run_attempts == 0
    assert instance.run_retries_enabled


def test_the_celery_profile_is_the_postgres_profile_with_celery_workers() -> None:
    import yaml

    celery = yaml.safe_load((DEPLOY / "dagster.celery.yaml").read_text())
    postgres = yaml.safe_load((DEPLOY / "dagster.postgres.yaml").read_text())
    assert celery.pop("run_launcher")["class"] == "PipelinesCeleryRunLauncher"
    assert celery["run_monitoring"].pop("max_resume_run_attempts") == 0
    # Runs wait in Dagster's queue until a pool process is free, not in the broker; no capture processes per run.
    assert celery["concurrency"]["runs"].pop("max_concurrent_runs") == 4
    assert celery.pop("compute_logs")["class"] == "NoOpComputeLogManager"
    assert celery == postgres


def test_a_run_whose_worker_died_is_retried_once_and_a_step_failure_is_not(instance: dg.DagsterInstance) -> None:
    assert instance.run_retries_enabled
    assert instance.run_retries_max_retries == 1
    assert instance.run_retries_retry_on_asset_or_op_failure is False
    # What the code server or run monitoring reports for a run whose process is gone: no failure reason.
    died = instance.add_run(dg.DagsterRun(job_name="crawl", status=dg.DagsterRunStatus.STARTED))
    instance.report_run_failed(died)
    # What a failed step (a guard's refusal, or a step past its retry policy) fails its run with.
    refused = instance.add_run(dg.DagsterRun(job_name="crawl", status=dg.DagsterRunStatus.STARTED))
    instance.report_run_failed(
        refused, job_failure_data=JobFailureData(error=None, failure_reason=RunFailureReason.STEP_FAILURE)
    )
    assert instance.get_run_by_id(died.run_id).tags[WILL_RETRY_TAG] == "true"
    assert instance.get_run_by_id(refused.run_id).tags[WILL_RETRY_TAG] == "false"


def test_the_packages_loggers_write_to_the_run_log(instance: dg.DagsterInstance, sqlite_engine: sa.Engine) -> None:
    from pipelines_dagster.core.storage.locks import DatabaseLocks

    assert instance.managed_python_loggers == ["pipelines_dagster"]

    @dg.asset
    def loses_its_lock(context) -> None:  # unannotated: this module postpones annotations
        locks = DatabaseLocks(sqlite_engine)
        with locks.hold("pipeline:1", "run-1", ttl_seconds=5, renew_every=0.05) as held:
            locks.release("pipeline:1", "run-1")  # as if its lease had expired and been taken
            assert held.lost.wait(5)
        context.log.info("an INFO line from the step")

    result = dg.materialize([loses_its_lock], instance=instance)

    assert result.success
    logs = [
        (entry.level, entry.user_message) for entry in instance.all_logs(result.run_id) if entry.dagster_event is None
    ]
    # Logged by core/storage/locks.py from its renewal thread, through logging.getLogger(__name__).
    assert (logging.WARNING, "lock 'pipeline:1' was lost: it expired or another owner took it") in logs
    # The managed loggers' level is context.log's too: INFO lines, like the crawl's progress, still land.
    assert (logging.INFO, "an INFO line from the step") in logs


def test_every_way_of_loading_the_code_location_names_it_as_launches_and_reseeding_do() -> None:
    import tomllib

    import yaml

    from pipelines_dagster.runs import CODE_LOCATION

    repo = DEPLOY.parent
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    [entry] = yaml.safe_load((repo / "workspace.yaml").read_text())["load_from"]
    assert entry["python_module"]["location_name"] == CODE_LOCATION
    assert pyproject["tool"]["dagster"]["code_location_name"] == CODE_LOCATION
    assert pyproject["tool"]["dg"]["project"]["code_location_name"] == CODE_LOCATION
