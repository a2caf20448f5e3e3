"""Extraction slots: the cap on live extraction worker processes across every run on one machine.

A slot is an exclusive `flock` on one of `count` files in a directory every process of the machine shares.
The run process takes a slot for a worker it is about to start, hands the locked file to that worker and
closes its own copy, so the lock lives exactly as long as the worker: the OS lets it go when the worker
exits or is killed, and a run killed with its workers never leaves a slot taken.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class SlotsUnavailable(Exception):
    """The slot directory cannot be used; the message says which directory and why."""


class ExtractionSlots:
    """`count` slots in `directory`: at most `count` extraction workers live at once among every process
    sharing it. Give every process of a machine the same directory and count."""

    def __init__(self, directory: Path, count: int) -> None:
        if count < 1:
            raise ValueError(f"the number of extraction slots must be at least 1, got {count}")
        self.directory = directory
        self.count = count

    def try_take(self) -> int | None:
        """A file descriptor holding a free slot's lock, or None when every slot is taken.

        The descriptor is not inheritable: pass it to the worker explicitly (`pass_fds`), then close it.
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for index in range(self.count):
                fd = os.open(self.directory / f"slot-{index}", os.O_RDONLY | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                except BaseException:
                    os.close(fd)
                    raise
                return fd
        except OSError as exc:
            raise SlotsUnavailable(
                f"the extraction slot directory {self.directory} cannot be used ({exc.strerror or exc}): "
                "point the extraction slots directory setting at one this user may write"
            ) from None
        return None
