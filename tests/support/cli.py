"""The `pipelines-dagster` command run as a user runs it: a process of its own, with an environment that names
no deployment but the one given, from a directory of the test's choosing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("pipelines-dagster")


def cli_env(data_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """This environment without any PIPELINES_* or DAGSTER_* variable, then `data_dir` as PIPELINES_DATA_DIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "DAGSTER_"))}
    if data_dir is not None:
        env["PIPELINES_DATA_DIR"] = str(data_dir)
    return {**env, **extra}


def run_cli(*args: str, env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port some other program listens on, for as long as the block runs."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]
