"""`pipelines-dagster worker`: its options as the Celery worker's arguments, the Celery app it takes from the
instance's CeleryRunLauncher, and its refusals (bad names, an instance that launches runs otherwise)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pipelines_dagster.cli.main import main
from pipelines_dagster.cli.worker import MAX_TASKS_PER_CHILD, config_problem, launcher_app, worker_argv
from pipelines_dagster.settings import load_settings
from tests.conftest import database_beside

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
BROKER = "amqp://guest:guest@mq.invalid:5672//"
BACKEND = "redis://cache.invalid:6379/1"


def test_the_options_become_a_prefork_worker_on_the_queues_with_bounded_tasks_per_process():
    argv = worker_argv(queues=("pipelines", "heavy"), concurrency=3, name="site-crawls")
    assert argv == [
        "worker",
        "--queues=pipelines,heavy",
        "--pool=prefork",
        "--concurrency=3",
        f"--max-tasks-per-child={MAX_TASKS_PER_CHILD}",
        "--prefetch-multiplier=1",
        f"--hostname=site-crawls@{socket.gethostname()}",
        "--loglevel=INFO",
    ]
    assert MAX_TASKS_PER_CHILD == 200
    # A name with its host is Celery's node name as given.
    assert "--hostname=w1@box-7" in worker_argv(queues=("q",), concurrency=1, name="w1@box-7")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "a,b"], "without commas"),
        (["--queue", " "], "is not a queue name"),
        (["--queue", "amq.gen"], "RabbitMQ's own"),
        (["--name", "two words"], "is not a worker name"),
        (["--name", "a@b@c"], "is not a worker name"),
        (["--concurrency", "0"], "0 is not in the range"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(args: list[str], message: str):
    result = CliRunner().invoke(main, ["worker", *args])
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.integration
def test_the_app_is_the_launchers_with_the_run_task_and_its_default_queue(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.celery.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("PIPELINES_DATABASE_URL", postgres_url)
    monkeypatch.setenv("PIPELINES_CELERY_BROKER_URL", BROKER)
    monkeypatch.setenv("PIPELINES_CELERY_BACKEND_URL", BACKEND)
    with database_beside(postgres_url, "dagster") as dagster_url:
        monkeypatch.setenv("DAGSTER_PG_URL", dagster_url)
        app, default_queue = launcher_app(load_settings())
    assert default_queue == "pipelines"
    assert (app.conf.broker_url, app.conf.result_backend) == (BROKER, BACKEND)
    assert app.conf.result_extended is True
    assert "execute_job" in app.tasks


def _worker_on(tmp_path: Path, config: str, **env: str | None) -> Result:
    """`pipelines-dagster worker` on a Dagster home with deploy/`config`, an app database named, and `env`."""
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(DEPLOY / config, home / "dagster.yaml")
    given = {"DAGSTER_HOME": str(home), "PIPELINES_DATABASE_URL": f"sqlite:///{tmp_path / 'app.sqlite3'}"}
    return CliRunner().invoke(main, ["worker"], env=given | env)


def test_an_instance_that_launches_runs_otherwise_is_refused_naming_the_celery_profile(tmp_path: Path):
    result = _worker_on(tmp_path, "dagster.yaml")
    assert result.exit_code == 1, result.output
    assert f"the Dagster instance at {tmp_path / 'dagster-home'} launches runs with DefaultRunLauncher" in result.output
    assert "copy deploy/dagster.celery.yaml to $DAGSTER_HOME/dagster.yaml" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_celery_profile_without_its_variables_is_refused_naming_the_one_missing(tmp_path: Path):
    result = _worker_on(tmp_path, "dagster.celery.yaml", DAGSTER_PG_URL=None)
    assert result.exit_code == 1, result.output
    assert f"cannot load the Dagster instance at {tmp_path / 'dagster-home'}" in result.output
    assert "set DAGSTER_PG_URL, which its dagster.yaml reads" in result.output
    assert "Stack Trace" not in result.output


def test_a_config_problem_is_the_variables_to_set_else_the_first_line_of_each_error():
    unset = (
        "Post processing failed:\nPostProcessingError: You have attempted to fetch the environment variable "
        '"{}" which is not set.\n\nStack Trace: ...'
    )
    messages = [unset.format("PIPELINES_CELERY_BROKER_URL"), unset.format("PIPELINES_CELERY_BACKEND_URL")]
    assert config_problem(messages) == (
        "set PIPELINES_CELERY_BROKER_URL and PIPELINES_CELERY_BACKEND_URL, which its dagster.yaml reads"
    )
    assert config_problem(["Value at path root:default_queue must be a string.\n  details", ""]) == (
        "Value at path root:default_queue must be a string."
    )
