"""`dg` loads the project as workspace.yaml and [tool.dagster] do, and its definitions pass `dg check defs`."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.conftest import IN_CI
from tests.test_definitions import REPO, run_in_repo


def test_dg_loads_the_code_location_under_the_same_module_and_name() -> None:
    # Runs keep their origin only while every way of loading names the location alike.
    tools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]
    [entry] = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"]
    workspace = entry["python_module"]
    dg = tools["dg"]["project"]

    assert tools["dg"]["directory_type"] == "project"
    assert dg["code_location_target_module"] == tools["dagster"]["module_name"] == workspace["module_name"]
    assert dg["code_location_name"] == tools["dagster"]["code_location_name"] == workspace["location_name"]


def test_dg_check_defs_passes(tmp_path: Path) -> None:
    if importlib.util.find_spec("dagster_dg_cli") is None:
        message = "dg is not installed: `make install-dev` installs the dev extra"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    result = run_in_repo(tmp_path, ["-m", "dagster_dg_cli.cli", "check", "defs"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully." in result.stdout
