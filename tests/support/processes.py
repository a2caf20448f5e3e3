"""Stopping the servers tests start in their own process groups."""

from __future__ import annotations

import os
import signal
import subprocess


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
