"""What a user sees is what they asked for: no Dagster preview, beta or superseded-command warnings from the CLI
or `make run`, no "No dagster instance configuration file" (the config is in place before the instance opens),
and over MCP stdio nothing on stdout but the protocol, nothing on stderr below WARNING."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from pipelines_dagster.settings import CHECKOUT_DIR
from tests.support.cli import SCRIPT, cli_env, run_cli
from tests.support.dagster_dev import wait_for
from tests.support.processes import stop_group
from tests.test_demo import free_port

NOISE = ("PreviewWarning", "BetaWarning", "SupersessionWarning", "superseded", "No dagster instance configuration")


@pytest.fixture
def deployment(tmp_path) -> tuple[dict[str, str], Path, dict]:
    """A new embedded deployment with a workspace, made through the CLI from a directory of its own."""
    env, cwd = cli_env(tmp_path / "data"), tmp_path / "cwd"
    cwd.mkdir()
    assert run_cli("db", "upgrade", env=env, cwd=cwd).returncode == 0
    made = run_cli("workspace", "create", "--name", "Acme", "--owner", "u", "--json", env=env, cwd=cwd)
    assert made.returncode == 0 and made.stderr == "", made.stderr
    return env, cwd, json.loads(made.stdout)


def test_pipeline_commands_print_their_answer_and_no_warning(deployment):
    env, cwd, workspace = deployment
    ws = str(workspace["id"])
    args = f"connector create --workspace {ws} --type webcrawler --url https://example.com/ --json"
    connector = run_cli(*args.split(), env=env, cwd=cwd)
    assert connector.returncode == 0 and connector.stderr == "", connector.stderr
    connector_id = str(json.loads(connector.stdout)["id"])
    created = run_cli(
        "pipeline", "create", "--workspace", ws, "--connector", connector_id, "--name", "Docs", env=env, cwd=cwd
    )
    assert created.returncode == 0 and created.stderr == "", created.stderr
    listed = run_cli("pipeline", "list", "--workspace", ws, "--json", env=env, cwd=cwd)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert "Docs" in [pipeline["name"] for pipeline in json.loads(listed.stdout)["pipelines"]]
    # Loads the code location in process: the warnings Dagster gives while resolving it are filtered too.
    seeded = run_cli("templates", "seed", "--json", env=env, cwd=cwd)
    assert seeded.returncode == 0 and seeded.stderr == "", seeded.stderr
    json.loads(seeded.stdout)


def test_mcp_over_stdio_writes_only_protocol_on_stdout(deployment):
    env, cwd, workspace = deployment
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_pipeline_runs", "arguments": {}}},
    ]
    # The server opens the Dagster instance afresh, as on a machine where only the app database was set up:
    # what Dagster logs while making its storage (Alembic's INFO lines among it) is no protocol.
    shutil.rmtree(Path(env["PIPELINES_DATA_DIR"]) / "dagster-home")
    server = subprocess.Popen(
        [SCRIPT, "mcp"],
        env={**env, "PIPELINES_MCP_TOKEN": workspace["api_token"]},
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    answers = []
    try:
        for request in requests:
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            if "id" in request:
                answers.append(json.loads(server.stdout.readline()))
    finally:
        out, err = server.communicate(timeout=60)
    assert [answer["id"] for answer in answers] == [1, 2, 3]
    assert all(answer["jsonrpc"] == "2.0" and "result" in answer for answer in answers), answers
    assert out == ""
    assert not [line for line in err.splitlines() if not line.startswith(("WARNING", "ERROR", "CRITICAL"))], err


def test_demo_once_on_a_fresh_data_dir_opens_its_instance_with_its_config(tmp_path):
    done = run_cli("demo", "--once", "--site-port", str(free_port()), env=cli_env(tmp_path / "data"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [noise for noise in NOISE if noise in done.stderr], done.stderr[:3000]
    assert (tmp_path / "data" / "dagster-home" / "dagster.yaml").read_text() == (
        CHECKOUT_DIR / "deploy" / "dagster.yaml"
    ).read_text()
    assert json.loads(done.stdout)["documents"] >= 30


def test_make_run_serves_the_ui_and_the_site_on_the_ports_given_without_noise(tmp_path):
    assert CHECKOUT_DIR is not None
    ui, site = free_port(), free_port()
    log = tmp_path / "make-run.log"
    process = subprocess.Popen(
        ["make", "--no-print-directory", "run", f"UI_PORT={ui}", f"SITE_PORT={site}"],
        cwd=CHECKOUT_DIR,
        env=cli_env(tmp_path / "data"),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def up() -> bool:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.get(f"http://127.0.0.1:{ui}/server_info", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the Dagster UI of make run", up, timeout=180, every=0.5)
        assert httpx.get(f"http://127.0.0.1:{site}/urls.txt", timeout=5).status_code == 200
        # The code location has loaded (its sensors tick) by the time the daemon logs a sensor's tick.
        wait_for("a sensor tick", lambda: "Checking for new runs for sensor" in log.read_text(), timeout=120)
    finally:
        stop_group(process)
        with contextlib.suppress(ProcessLookupError):
            # Code servers `dagster dev` started as it was stopped would linger until their heartbeat ran out.
            os.killpg(process.pid, signal.SIGKILL)
    printed = log.read_text()
    assert f"Dagster UI: http://127.0.0.1:{ui}" in printed and f"demo site: http://127.0.0.1:{site}/" in printed
    assert not [noise for noise in NOISE if noise in printed], printed[:5000]
