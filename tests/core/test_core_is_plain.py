"""The domain core and the notifications are plain Python: importing every module of them loads no Dagster."""

from __future__ import annotations

import subprocess
import sys


def test_no_core_module_imports_dagster_even_indirectly():
    script = (
        "import importlib, pkgutil, sys\n"
        "import pipelines_dagster.core as core, pipelines_dagster.notifications as notifications\n"
        "for package in (core, notifications):\n"
        "    for module in pkgutil.iter_modules(package.__path__):\n"
        "        importlib.import_module(f'{package.__name__}.{module.name}')\n"
        "print(sorted({name.split('.')[0] for name in sys.modules if name.split('.')[0].startswith('dagster')}))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"core/ pulls in {loaded.strip()}"
