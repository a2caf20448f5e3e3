"""The browser's process tree, read from /proc: which processes a launch made, and how much memory they hold.

Chromium runs a page in a renderer process under a zygote under the browser process, so a cap on the
browser's memory has to count the whole tree. Linux only, as the system Chromium the renderer drives is.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

_PROC = Path("/proc")


def launched_by(marker: str) -> int | None:
    """The process id of the browser whose command line carries `marker`: the one whose parent does not
    (Chromium copies switches to some of its children), or None if there is none."""
    marked = {pid for pid, cmdline in _command_lines().items() if marker in cmdline}
    parents = _parents()
    roots = sorted(pid for pid in marked if parents.get(pid) not in marked)
    return roots[0] if roots else None


def tree(root: int) -> list[int]:
    """`root` and every process descended from it that is alive now."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, ()))
    return found


def tree_memory(root: int) -> int:
    """The bytes the process tree under `root` holds: the sum of each process's proportional set size.

    PSS rather than RSS, because Chromium's processes share most of their pages (the binary, the
    zygote's heap); summing RSS would count each shared page once per process, several times over.
    """
    total = 0
    for pid in tree(root):
        with contextlib.suppress(OSError):  # a process that ended between the listing and the read holds nothing
            for line in (_PROC / str(pid) / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


def kill_tree(root: int) -> None:
    """SIGKILL `root` and every process descended from it, so no renderer process outlives its browser."""
    for pid in tree(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def is_running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie, ended but not yet reaped, has)."""
    try:
        state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def kill_marked(marker: str) -> None:
    """SIGKILL every process whose command line carries `marker`: what is left of a browser whose root has gone."""
    for pid, cmdline in _command_lines().items():
        if marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _parents() -> dict[int, int]:
    parents = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # The command name (field 2) may hold spaces and parentheses: the fields after its last ")" are fixed.
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
    return parents


def _command_lines() -> dict[int, str]:
    lines = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                lines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return lines
