"""The layout's rules that no import contract states: rooms that import nothing on entry, files that
hold one noun, and the contracts themselves catching a circle that comes back."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pipelines_dagster"
CORE_MAX_LINES = 400
CLI_MAX_LINES = 300


def _python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "migrations" not in path.parts)


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_every_package_says_what_it_holds_in_its_init_and_imports_nothing():
    for init in PACKAGE.rglob("__init__.py"):
        if "migrations" in init.parts:
            continue
        tree = ast.parse(init.read_text())
        docstring = ast.get_docstring(tree)
        assert docstring, f"{init.relative_to(REPO)} has no docstring saying what the package holds"
        assert len(tree.body) == 1, f"{init.relative_to(REPO)} holds more than its docstring"


def test_no_module_of_core_passes_400_lines():
    long = {
        str(p.relative_to(REPO)): n for p in _python_files(PACKAGE / "core") if (n := _line_count(p)) > CORE_MAX_LINES
    }
    assert long == {}, "a module this long holds two nouns: split it"


def test_no_file_of_the_cli_passes_300_lines():
    files = _python_files(PACKAGE / "cli")
    assert files, "the CLI is the package pipelines_dagster/cli"
    long = {str(p.relative_to(REPO)): n for p in files if (n := _line_count(p)) > CLI_MAX_LINES}
    assert long == {}, "a command group this long holds two: split it"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter with the project's contracts, over the package as it is under `root`."""
    return subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_refuse_a_circle_brought_back_by_an_import_inside_a_function(tmp_path):
    pytest.importorskip("importlinter", reason="import-linter comes with the test extra: make install")
    shutil.copytree(PACKAGE, tmp_path / "pipelines_dagster", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    kept = _lint_imports(tmp_path)
    assert kept.returncode == 0, repr(kept.stdout[-3000:] + kept.stderr[-3000:])
    # The catalog's old circle: the templates reaching back into the pipelines that read them.
    templates = tmp_path / "pipelines_dagster" / "core" / "catalog" / "templates.py"
    templates.write_text(
        templates.read_text() + "\n\ndef _pipelines():\n    from pipelines_dagster.core.catalog import pipelines\n\n"
        "    return pipelines\n"
    )
    broken = _lint_imports(tmp_path)
    assert broken.returncode != 0
    assert "No circles among sibling modules" in broken.stdout
    assert ".templates -> .pipelines" in broken.stdout, broken.stdout
