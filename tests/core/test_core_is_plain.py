"""The domain core is plain Python: importing every core module loads no Dagster."""

from __future__ import annotations

import subprocess
import sys


def test_no_core_module_imports_dagster_even_indirectly():
    script = (
        "import importlib, pkgutil, sys\n"
        "import pipelines_dagster.core as core\n"
        "for module in pkgutil.iter_modules(core.__path__):\n"
        "    importlib.import_module(f'pipelines_dagster.core.{module.name}')\n"
        "print(sorted({name.split('.')[0] for name in sys.modules if name.split('.')[0].startswith('dagster')}))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"core/ pulls in {loaded.strip()}"
