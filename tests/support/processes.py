"""Starting servers for tests in their own process groups, and stopping or killing them."""

from __future__ import annotations

import os
import select
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


def kill_when_it_says(command: list[str], line: bytes, *, env: dict[str, str], cwd: Path, log: Path) -> None:
    """Run `command` in its own process group until it prints `line`, then SIGKILL the group there, as a
    machine dies mid-work; fail with its log if it never gets there."""
    with log.open("wb") as errors:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=errors, start_new_session=True
        )
        assert process.stdout is not None
        try:
            ready, _, _ = select.select([process.stdout], [], [], 120)
            said = process.stdout.readline() if ready else b""
            assert said == line, f"{command} did not get to print {line!r}:\n{log.read_text()[-3000:]}"
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            process.stdout.close()
    assert process.returncode == -signal.SIGKILL
