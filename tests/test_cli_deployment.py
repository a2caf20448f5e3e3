"""Where the CLI finds its deployment, run from any directory: PIPELINES_DATA_DIR, else the checkout's data dir;
never an empty deployment made without a word. And its servers' ports: their defaults apart, and a port taken
stops `demo` (and `make run`) before anything starts, naming it."""

from __future__ import annotations

import json
import re
import subprocess

import psutil
import pytest

from pipelines_dagster.settings import CHECKOUT_DIR, DATA_DIR_NAME
from tests.support.cli import SCRIPT, cli_env, run_cli, taken_port
from tests.test_demo import free_port


def test_a_command_where_no_deployment_exists_says_where_it_looked_and_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere"
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    for args in (
        ["workspace", "list"],
        ["pipeline", "list", "--workspace", "1"],
        ["token", "list", "--workspace", "1"],
    ):
        done = run_cli(*args, env=cli_env(missing), cwd=elsewhere)
        assert done.returncode == 1, done.stderr
        assert f"no deployment at {missing} (PIPELINES_DATA_DIR)" in done.stderr
        assert "`make run`" in done.stderr and "`pipelines-dagster db upgrade`" in done.stderr
        assert "Traceback" not in done.stderr
    assert not missing.exists() and list(elsewhere.iterdir()) == []


def test_the_deployment_made_with_db_upgrade_is_found_from_any_directory(tmp_path):
    data = tmp_path / "data"
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir(), second.mkdir()
    assert run_cli("db", "upgrade", env=cli_env(data), cwd=first).returncode == 0
    made = json.loads(
        run_cli("workspace", "create", "--name", "Acme", "--owner", "u", "--json", env=cli_env(data), cwd=first).stdout
    )
    listed = json.loads(run_cli("workspace", "list", "--json", env=cli_env(data), cwd=second).stdout)
    assert [w["id"] for w in listed["workspaces"]] == [made["id"]]
    assert list(first.iterdir()) == list(second.iterdir()) == []


def test_without_pipelines_data_dir_the_cli_uses_the_checkouts_data_dir_not_the_current_one(tmp_path):
    assert CHECKOUT_DIR is not None, "the tests run from a checkout, with the package installed from it"
    checkout_data = CHECKOUT_DIR / DATA_DIR_NAME
    had_deployment = (checkout_data / "app.sqlite3").is_file()
    # CI's `make check-defs` gives the checkout a Dagster home before the tests: the data dir may exist
    # without a deployment in it, and the refusal must leave it as it found it.
    before = sorted(checkout_data.rglob("*")) if checkout_data.exists() else None
    # A deployment in the current directory is not the one: an empty PIPELINES_DATA_DIR is unset too.
    here = cli_env(tmp_path / DATA_DIR_NAME)
    assert run_cli("db", "upgrade", env=here, cwd=tmp_path).returncode == 0
    made = run_cli("workspace", "create", "--name", "current-directory", "--owner", "u", env=here, cwd=tmp_path)
    assert made.returncode == 0
    done = run_cli("workspace", "list", "--json", env=cli_env(PIPELINES_DATA_DIR=""), cwd=tmp_path)
    if had_deployment:
        # A developer's own deployment: read, not changed.
        assert done.returncode == 0, done.stderr
        assert "current-directory" not in [w["name"] for w in json.loads(done.stdout)["workspaces"]]
    else:
        assert done.returncode == 1
        assert f"no deployment at {checkout_data} (the checkout's data dir)" in done.stderr
        assert (sorted(checkout_data.rglob("*")) if checkout_data.exists() else None) == before
    assert [path.name for path in tmp_path.iterdir()] == [DATA_DIR_NAME]


def _help_default(*command: str) -> dict[str, int]:
    shown = subprocess.run([SCRIPT, *command, "--help"], capture_output=True, text=True, check=True).stdout
    return {
        option: int(port)
        for option, port in re.findall(r"(--[a-z-]*port)\b[^\[]*\[(?:[^\]]*?)default: (\d+)", shown, flags=re.S)
    }


def test_every_server_has_a_default_port_of_its_own():
    api, mcp = _help_default("api"), _help_default("mcp")
    demo = subprocess.run([SCRIPT, "demo", "--help"], capture_output=True, text=True, check=True).stdout
    demo_ports = [int(port) for port in re.findall(r"else\s+(\d+)\]", demo)]
    assert api == {"--port": 8000} and mcp == {"--port": 8100} and demo_ports == [8765, 3000]
    assert len({api["--port"], mcp["--port"], *demo_ports}) == 4


def _left_running(data_dir) -> list[psutil.Process]:
    """Processes whose command line or environment names the test's data dir: what a failed start left behind."""
    left = []
    for process in psutil.process_iter(["cmdline", "environ"]):
        info = process.info
        named = " ".join(info["cmdline"] or []) + " ".join((info["environ"] or {}).values())
        if str(data_dir) in named:
            left.append(process)
    return left


@pytest.mark.parametrize("taken", ["ui", "site"])
def test_a_taken_port_stops_the_demo_before_anything_starts_naming_the_port(tmp_path, taken):
    data = tmp_path / "data"
    with taken_port() as busy:
        ui, site = (busy, free_port()) if taken == "ui" else (free_port(), busy)
        done = run_cli(
            "demo", "--ui-port", str(ui), "--site-port", str(site), env=cli_env(data), cwd=tmp_path, timeout=120
        )
    assert done.returncode == 1, done.stdout + done.stderr
    what = "the Dagster UI" if taken == "ui" else "the demo site"
    assert f"cannot serve {what} on 127.0.0.1:{busy}" in done.stderr and f"--{taken}-port" in done.stderr
    assert "Traceback" not in done.stderr
    assert _left_running(data) == []


def test_make_run_takes_its_ports_from_make_and_from_the_environment(tmp_path):
    assert CHECKOUT_DIR is not None
    data = tmp_path / "data"
    with taken_port() as busy:
        by_make = subprocess.run(
            ["make", "--no-print-directory", "run", f"UI_PORT={busy}"],
            cwd=CHECKOUT_DIR,
            env=cli_env(data),
            capture_output=True,
            text=True,
            timeout=300,
        )
        by_env = run_cli("demo", env=cli_env(data, PIPELINES_SITE_PORT=str(busy)), cwd=tmp_path, timeout=120)
    assert by_make.returncode != 0 and f"cannot serve the Dagster UI on 127.0.0.1:{busy}" in by_make.stderr
    assert by_env.returncode == 1 and f"cannot serve the demo site on 127.0.0.1:{busy}" in by_env.stderr
    bad = run_cli("demo", env=cli_env(data, PIPELINES_UI_PORT="70000"), cwd=tmp_path)
    assert bad.returncode == 1 and "PIPELINES_UI_PORT" in bad.stderr
    assert _left_running(data) == []
