"""The progress of a run as a user follows it, through `dagster dev` on the embedded default: a slow crawl's live
counts through the HTTP API and `runs` while `pipeline run --wait` follows it in a terminal, `--wait` ending with
the run's outcome and exit code, and the run log's start and summary lines naming the pipeline and the
robots.txt Crawl-delay that limits its rate."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from pipelines_dagster.api.app import create_app
from pipelines_dagster.cli.main import main
from pipelines_dagster.core.crawl.types import CrawlerConfig
from pipelines_dagster.launch import GraphQLLauncher
from tests.api.conftest import issue_token, settings_for
from tests.support.dagster_dev import BIN, Dev, Seeded, dagster_dev, seed, wait_for
from tests.support.processes import stop_group
from tests.support.web import NOT_FOUND, Reply, WebServer

pytestmark = pytest.mark.integration

RUN_WITHIN_SECONDS = 120.0


@pytest.fixture(scope="module")
def dev(tmp_path_factory) -> Iterator[Dev]:
    with dagster_dev(tmp_path_factory.mktemp("progress")) as deployment:
        yield deployment


def data_dir(dev: Dev) -> Path:
    return dev.home.parent / "data"


def cli_env(dev: Dev) -> dict[str, str]:
    """What a user's shell holds to reach the deployment: its data dir and database, its webserver, its Dagster home."""
    return {
        "PIPELINES_DATA_DIR": str(data_dir(dev)),
        "PIPELINES_DATABASE_URL": dev.engine.url.render_as_string(hide_password=False),
        "PIPELINES_DAGSTER_URL": dev.ui_url,
        "DAGSTER_HOME": str(dev.home),
    }


@pytest.fixture
def cli(dev: Dev, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    for name, value in cli_env(dev).items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(main, list(args), catch_exceptions=False)

    return invoke


@pytest.fixture
def api(dev: Dev) -> Iterator[TestClient]:
    app = create_app(
        settings=settings_for(dev.engine, data_dir(dev)), instance=dev.instance, launcher=GraphQLLauncher(dev.ui_url)
    )
    with TestClient(app) as client:
        yield client


def run_path(seeded: Seeded, run_id: str) -> str:
    return f"/workspaces/{seeded.workspace_id}/pipelines/{seeded.pipeline_id}/runs/{run_id}"


def run_args(seeded: Seeded, *flags: str) -> list[str]:
    return ["pipeline", "run", "--workspace", str(seeded.workspace_id), "--pipeline", str(seeded.pipeline_id), *flags]


@dataclass
class Terminal:
    """A command run as in a terminal: its stderr on a pseudo-terminal (read as it comes), its stdout a pipe."""

    process: subprocess.Popen
    screen: bytearray = field(default_factory=bytearray)

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().decode().rstrip("\n")

    def end(self, *, timeout: float) -> tuple[int, list[str], str]:
        """Its exit code, the rest of its stdout's lines and all its terminal showed."""
        stdout, _ = self.process.communicate(timeout=timeout)
        return self.process.returncode, stdout.decode().splitlines(), self.screen.decode(errors="replace")


@contextmanager
def in_a_terminal(dev: Dev, args: list[str]) -> Iterator[Terminal]:
    controller, tty = pty.openpty()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINES_", "DAGSTER_"))}
    process = subprocess.Popen(
        [str(BIN / "pipelines-dagster"), *args],
        stdout=subprocess.PIPE,
        stderr=tty,
        env=env | cli_env(dev),
        start_new_session=True,
    )
    os.close(tty)
    terminal = Terminal(process)

    def read() -> None:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the command closed the terminal: it has ended
                return
            if not chunk:
                return
            terminal.screen += chunk

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield terminal
    finally:
        stop_group(process)
        reader.join(timeout=5)
        os.close(controller)


def test_a_slow_crawl_shows_live_counts_in_the_api_and_runs_while_wait_follows_it_in_a_terminal(dev, cli, api):
    # Four pages at a time, each answering after 2.5 s: 20 s of crawling, its progress recorded at 10 s and 20 s.
    seeded = seed(dev, "slowcrawl", pages=32, delay=2.5)
    headers = {"Authorization": f"Bearer {issue_token(dev.sessions, seeded.workspace_id)}"}
    with in_a_terminal(dev, run_args(seeded, "--wait")) as terminal:
        run_id = terminal.line()
        assert terminal.line() == f"{dev.ui_url}/runs/{run_id}"
        path = run_path(seeded, run_id)

        def crawling() -> dict[str, Any] | None:
            answer = api.get(path, headers=headers)
            assert answer.status_code == 200, answer.text
            run = answer.json()
            return run if run["status"] == "running" and run["crawls_attempted"] is not None else None

        live = wait_for(f"live counts of run {run_id}", crawling, timeout=RUN_WITHIN_SECONDS, every=0.5)
        assert live["crawls_total"] == 32 and 0 < live["crawls_attempted"] <= 32
        assert live["crawls_attempted"] == live["crawls_succeeded"] + live["crawls_empty"] + live["crawls_failed"]
        assert live["pages_per_second"] > 0 and live["eta_seconds"] is not None and live["progress_at"] is not None
        assert live["rate_limited_by"].startswith("per-host concurrency of 127.0.0.1 (4 requests at a time)")

        runs = ["runs", "--workspace", str(seeded.workspace_id), "--pipeline", str(seeded.pipeline_id)]
        [shown] = [run for run in json.loads(cli(*runs, "--json").output)["runs"] if run["run_id"] == run_id]
        assert shown["status"] == "running" and shown["crawls_attempted"] >= live["crawls_attempted"]
        text = cli(*runs).output
        [line] = [line for line in text.splitlines() if line.startswith(run_id)]
        assert re.search(r"\trunning\tmanual\t\S+\t\d+ of 32 attempted, \d+ succeeded, 0 failed, [\d.]+ pages/s", line)

        code, rest, screen = terminal.end(timeout=RUN_WITHIN_SECONDS)
    assert code == 0, screen
    assert re.fullmatch(
        rf"run {run_id} succeeded in \d+ s: 32 attempted, 32 succeeded, 0 failed; charged 32000 micros; rate limited "
        r"by per-host concurrency of 127\.0\.0\.1 \(4 requests at a time\): .*",
        rest[-1],
    ), rest
    # One line, rewritten in place, with a bar while the total is known.
    assert "\r\x1b[K" in screen and re.search(r"running, \d+ s \[#+\.*\]: \d+ of 32 attempted", screen), screen
    final = api.get(path, headers=headers).json()
    assert (final["status"], final["crawls_attempted"], final["crawls_total"], final["eta_seconds"]) == (
        "succeeded",
        32,
        None,
        None,
    )
    [line] = [line for line in cli(*runs).output.splitlines() if line.startswith(run_id)]
    assert re.search(r"\tsucceeded\tmanual\t\S+\t32 attempted, 32 succeeded, 0 failed\t\d+ s\t32000 micros$", line)


def test_wait_follows_a_run_a_crawl_delay_paces_to_its_end_and_the_run_log_names_it(dev, cli):
    with WebServer() as polite:
        polite.route("/robots.txt", Reply(body="User-agent: *\nCrawl-delay: 1\n", content_type="text/plain"))
        seeded = seed(dev, "polite", pages=14, site=polite)
        result = cli(*run_args(seeded, "--wait"))
        origin = polite.base_url
    assert result.exit_code == 0, result.output
    run_id, link, summary = result.stdout.splitlines()
    assert link == f"{dev.ui_url}/runs/{run_id}"
    limited = f"rate limited by robots.txt Crawl-delay of {origin} (1 s between requests)"
    assert summary.startswith(f"run {run_id} succeeded in ") and limited in summary
    assert ": 14 attempted, 14 succeeded, 0 failed; charged 14000 micros; " in summary
    # Not a terminal: a plain line at each change, the counts once the crawl has recorded them (after 10 s).
    shown = [line for line in result.stderr.splitlines() if line.startswith(("queued", "running", "succeeded"))]
    assert re.fullmatch(r"succeeded, \d+ s: 14 attempted, 14 succeeded, 0 failed", shown[-1]), shown
    assert any(
        re.fullmatch(r"running, \d+ s: \d+ of 14 attempted, \d+ succeeded, 0 failed, [\d.]+ pages/s.*", line)
        for line in shown
    ), shown
    # Queued, running, its live counts, its stored counts, its end: not a line per second of its 15 s or more.
    assert len(shown) <= 6, shown

    log = [entry.user_message for entry in dev.instance.all_logs(run_id) if entry.dagster_event is None]
    named = f"pipeline {seeded.pipeline_id} (polite): "
    assert (
        f"{named}crawl started (attempt 1): 14 URLs of its list, 4 requests per host and 16 in all at a time; as "
        f"{CrawlerConfig.user_agent!r}, obeying robots.txt"
    ) in log
    [finished] = [line for line in log if line.startswith(f"{named}crawl finished: ")]
    assert finished.startswith(f"{named}crawl finished: 14 attempted, 14 succeeded, 0 empty, 0 failed in ")
    assert f"; {limited}: 13 requests waited " in finished
    assert any(line.startswith(f"pipeline {seeded.pipeline_id}: crawled ") and limited in line for line in log)


def test_wait_on_a_run_that_fails_exits_1_with_its_error(dev, cli, api):
    seeded = seed(dev, "gone", pages=2)
    for n in range(2):
        dev.site.route(f"/gone/{n}", NOT_FOUND)
    result = cli(*run_args(seeded, "--wait", "--json"))
    assert result.exit_code == 1
    run_id, link = result.stderr.splitlines()[:2]
    assert link == f"{dev.ui_url}/runs/{run_id}"
    headers = {"Authorization": f"Bearer {issue_token(dev.sessions, seeded.workspace_id)}"}
    answered = api.get(run_path(seeded, run_id), headers=headers).json()
    # --json: the run as GET .../runs/{run_id} answers it, and the error on stderr.
    assert json.loads(result.stdout) == answered
    assert answered["status"] == "failed" and (answered["crawls_attempted"], answered["crawls_failed"]) == (2, 2)
    assert result.stderr.splitlines()[-1] == f"Error: run {run_id} failed: {answered['error']}"
    assert answered["error"].startswith("the crawl is unhealthy: "), answered["error"]


def test_wait_from_a_shell_on_another_dagster_home_says_which_instance_to_read(dev, cli, monkeypatch, tmp_path):
    from pipelines_dagster.cli import runs as runs_command

    monkeypatch.setattr(runs_command, "UNKNOWN_RUN_SECONDS", 2.0)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "another-home"))
    seeded = seed(dev, "elsewhere", pages=1)
    result = cli(*run_args(seeded, "--wait"))
    assert result.exit_code == 1
    run_id = result.stdout.splitlines()[0]
    assert f"run {run_id} is not in the Dagster instance this command reads" in result.stderr
    assert "set DAGSTER_HOME to the webserver's" in result.stderr
    # The run itself went on, on the deployment it was launched on.
    assert wait_for(f"run {run_id} to end", lambda: dev.ended(run_id), timeout=RUN_WITHIN_SECONDS).status.value == (
        "SUCCESS"
    )
