"""What a catalog command loads: `pipelines-dagster pipeline list --json` in a fresh interpreter, against a real
SQLite app database, imports no Dagster and no web stack (checked on the modules it loaded, not by a timer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from pipelines_dagster.cli.main import main

# Runs the command as the console script does, then names every module the interpreter loaded.
SCRIPT = """
import json, sys
from pipelines_dagster.cli.main import main
main(sys.argv[1:], standalone_mode=False)
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""
# Dagster (and its packages), and the HTTP API's stack.
FORBIDDEN = ("dagster", "fastapi", "starlette", "uvicorn")


def forbidden(module: str) -> bool:
    top = module.partition(".")[0]
    return top in FORBIDDEN or top.startswith("dagster_")


def test_pipeline_list_json_loads_no_dagster_and_no_web_stack(tmp_path):
    ours = {"PIPELINES_DATA_DIR": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path / "dagster-home")}
    # Only these two of the deployment's variables: the embedded default, an SQLite app database.
    outside = {key: None for key in os.environ if key.startswith(("PIPELINES_", "DAGSTER_"))}
    env = {key: value for key, value in os.environ.items() if key not in outside} | ours

    def cli(*args: str) -> dict:
        result = CliRunner().invoke(main, [*args, "--json"], env=outside | ours, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    cli("db", "upgrade")
    workspace = str(cli("workspace", "create", "--name", "Acme", "--owner", "user-1")["id"])
    connector = cli("connector", "create", "--workspace", workspace, "--type", "webcrawler", "--url", "https://e.com/")
    made = cli("pipeline", "create", "--workspace", workspace, "--connector", str(connector["id"]), "--name", "docs")

    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "pipeline", "list", "--workspace", workspace, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    listed = json.loads(done.stdout)["pipelines"]
    assert made["id"] in [pipeline["id"] for pipeline in listed]
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert "pipelines_dagster.cli.pipeline" in loaded
    assert [module for module in loaded if forbidden(module)] == []
