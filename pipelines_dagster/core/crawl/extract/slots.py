"""Extraction slots: the cap on live extraction worker processes across every run on one machine.

A slot is an exclusive `flock` on one of `count` files in a directory every process of the machine shares.
The run process takes a slot for a worker it is about to start, hands the locked file to that worker and
closes its own copy, so the lock lives exactly as long as the worker: the OS lets it go when the worker
exits or is killed, and a run killed with its workers never leaves a slot taken.

A crawl that has no worker yet and finds every slot taken says so with a lock on the directory's `demand` file
while it waits: a worker kept idle between runs (see `workers.keep_a_worker_between_crawls`) sees that
and exits, giving its slot to the crawl that needs one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


class SlotsUnavailable(Exception):
    """The slot directory cannot be used; the message says which directory and why."""


@dataclass(frozen=True)
class ExtractionSlots:
    """`count` slots in `directory`: at most `count` extraction workers live at once among every process
    sharing it. Give every process of a machine the same directory and count."""

    directory: Path
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"the number of extraction slots must be at least 1, got {self.count}")

    @property
    def demand_file(self) -> Path:
        return self.directory / "demand"

    def open_demand(self) -> int:
        """A descriptor of the demand file, not inheritable: pass it to a worker explicitly, then close it."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            return os.open(self.demand_file, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unusable(exc) from None

    @contextlib.contextmanager
    def wanting(self) -> Iterator[Callable[[], None]]:
        """Inside, call what it yields each time you look for a slot again: while it holds the demand file's
        lock (one waiting process at a time does, the others retry), every process sharing the slots sees that a
        slot is wanted (`wanted`)."""
        fd = self.open_demand()

        def say() -> None:
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

        try:
            say()
            yield say
        finally:
            os.close(fd)

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
            raise self._unusable(exc) from None
        return None

    def _unusable(self, exc: OSError) -> SlotsUnavailable:
        return SlotsUnavailable(
            f"the extraction slot directory {self.directory} cannot be used ({exc.strerror or exc}): "
            "point the extraction slots directory setting at one this user may write"
        )


def wanted(demand: int) -> bool:
    """Whether a process waits for a slot (holds `wanting`), through a descriptor `demand` of the demand file."""
    # A shared lock: any number of idle workers may look at once without seeing one another as demand.
    try:
        fcntl.flock(demand, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(demand, fcntl.LOCK_UN)
    return False
