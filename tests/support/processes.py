"""Starting servers for tests in their own process groups, and stopping them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest


def start_server(
    command: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    log: Path,
    ready_url: str,
    ready_status: int = 200,
    timeout: float = 60,
) -> subprocess.Popen:
    """Start a server in its own process group and wait until `ready_url` answers `ready_status`; fail with its
    log if not."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(ready_url, timeout=3).status_code == ready_status:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop_group(process)
            tail = log.read_text(errors="replace")[-3000:]
            pytest.fail(f"{command[0]} did not answer at {ready_url}:\n{tail}", pytrace=False)
        time.sleep(0.2)


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group (a server and the code servers it spawned), SIGKILL after 30 s."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
