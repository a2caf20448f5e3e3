"""The domain core and the notifications are plain Python: importing every module of them loads no Dagster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pipelines_dagster

SCRIPT = """
import importlib, json, pkgutil, sys
import pipelines_dagster.core as core, pipelines_dagster.notifications as notifications
for package in (core, notifications):
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        importlib.import_module(module.name)
print(json.dumps({
    "dagster": sorted({name.split(".")[0] for name in sys.modules if name.split(".")[0].startswith("dagster")}),
    "ours": sorted(name for name in sys.modules if name.startswith("pipelines_dagster.core.")),
}))
"""


def test_no_core_module_imports_dagster_even_indirectly():
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    )
    assert loaded["dagster"] == [], f"core/ pulls in {loaded['dagster']}"
    # Every room of core/ was walked, not only its top level.
    root = Path(pipelines_dagster.__file__).parent
    modules = {
        ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in (root / "core").rglob("*.py")
    } - {"pipelines_dagster.core"}
    assert modules <= set(loaded["ours"])
