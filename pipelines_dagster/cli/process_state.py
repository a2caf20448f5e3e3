"""The state of a process that one piece of work can change and the next would inherit (environment, loggers,
garbage collector, signal handlers, working directory, import path ...): read, compared and put back."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

_FDS = "/proc/self/fd"
# How long the threads a run started get to end before they are named as left running.
_THREAD_GRACE_SECONDS = 1.0


@dataclass(frozen=True)
class _Part:
    """One part of a process's state: how to read it, and how to put a reading back (None: it cannot be,
    safely, and is only reported)."""

    name: str
    read: Callable[[], Any]
    restore: Callable[[Any, Any], object] | None
    # What differs between two readings, in names a reader can act on; empty when nothing does.
    changes: Callable[[Any, Any], list[str]]


def _changed_keys(before: Mapping[Any, Any], after: Mapping[Any, Any]) -> list[str]:
    return sorted(str(key) for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def _changed_value(label: str) -> Callable[[Any, Any], list[str]]:
    return lambda before, after: [] if before == after else [label]


def _restore_environment(before: dict[str, str], after: dict[str, str]) -> None:
    for name in after.keys() - before.keys():
        del os.environ[name]
    for name, value in before.items():
        if after.get(name) != value:
            os.environ[name] = value


# -- loggers: the root logger and every named one; a logger a run created is reset to no handlers of its own


@dataclass(frozen=True)
class _LoggerState:
    level: int
    propagate: bool
    disabled: bool
    handlers: tuple[logging.Handler, ...]
    filters: tuple[Any, ...]


def _loggers() -> dict[str, logging.Logger]:
    named = {
        name: value for name, value in logging.root.manager.loggerDict.items() if isinstance(value, logging.Logger)
    }
    return {"root": logging.root, **named}


def _read_loggers() -> dict[str, _LoggerState]:
    return {
        name: _LoggerState(one.level, one.propagate, one.disabled, tuple(one.handlers), tuple(one.filters))
        for name, one in _loggers().items()
    }


def _logger_changes(before: dict[str, _LoggerState], after: dict[str, _LoggerState]) -> list[str]:
    # A logger first made during a run is only a change when the run gave it handlers: libraries the run
    # imported make their loggers as they load, with at most a NullHandler.
    return sorted(
        name
        for name, state in after.items()
        if (name in before and before[name] != state)
        or (name not in before and any(not isinstance(handler, logging.NullHandler) for handler in state.handlers))
    )


def _restore_loggers(before: dict[str, _LoggerState], after: dict[str, _LoggerState]) -> None:
    kept = {handler for state in before.values() for handler in state.handlers}
    loggers = _loggers()
    for name in _logger_changes(before, after):
        one = loggers[name]
        if name in before:
            state = before[name]
            one.setLevel(state.level)
            one.propagate, one.disabled = state.propagate, state.disabled
            one.handlers[:], one.filters[:] = state.handlers, state.filters
        else:
            one.handlers[:] = [handler for handler in one.handlers if isinstance(handler, logging.NullHandler)]
    for handler in {handler for state in after.values() for handler in state.handlers} - kept:
        if not any(handler in one.handlers for one in loggers.values()):
            handler.close()  # a file it opened goes with it


# -- signal handlers: only the main thread may read or set them, and a prefork pool runs its tasks there


def _read_signals() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {number: signal.getsignal(number) for number in signal.valid_signals() if number not in _UNCATCHABLE}


_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}


def _signal_changes(before: dict[int, Any], after: dict[int, Any]) -> list[str]:
    # A handler of the worker's own (Celery's warm shutdown, set as SIGTERM arrives) is not the run's doing.
    return [
        signal.Signals(int(number)).name
        for number in _changed_keys(before, after)
        if not getattr(after.get(int(number)), "__module__", "").startswith(_WORKER_PACKAGES)
    ]


_WORKER_PACKAGES = ("celery.", "billiard.")


def _restore_signals(before: dict[int, Any], after: dict[int, Any]) -> None:
    for name in _signal_changes(before, after):
        number = signal.Signals[name]
        if before.get(number) is not None:  # None: set outside Python, where it was not ours to change
            signal.signal(number, before[number])


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _restore_warnings(before: list[Any], after: list[Any]) -> None:
    cast(list[Any], warnings.filters)[:] = before
    warnings._filters_mutated()  # type: ignore[attr-defined]  # the cache of what was already shown


def _restore_gc(before: tuple[bool, tuple[int, ...]], after: tuple[bool, tuple[int, ...]]) -> None:
    enabled, threshold = before
    gc.set_threshold(*threshold)
    if enabled:
        gc.enable()
    else:
        gc.disable()


def _restore_interpreter(before: tuple[int, float, float | None], after: object) -> None:
    sys.setrecursionlimit(before[0])
    sys.setswitchinterval(before[1])
    socket.setdefaulttimeout(before[2])


def _threads() -> frozenset[threading.Thread]:
    return frozenset(threading.enumerate())


def _threads_left(before: frozenset[threading.Thread], after: frozenset[threading.Thread]) -> list[str]:
    """The threads a run started that are still running, given a moment to end: a run stops some of its
    threads (an executor's, a watcher's) without waiting for them."""
    deadline = time.monotonic() + _THREAD_GRACE_SECONDS
    left = []
    for thread in sorted(after - before, key=lambda thread: thread.name):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            left.append(f"{thread.name} (daemon)" if thread.daemon else thread.name)
    return left


def _open_files() -> frozenset[int]:
    if not os.path.isdir(_FDS):
        return frozenset()
    return frozenset(int(fd) for fd in os.listdir(_FDS) if _is_open(int(fd)))


def _is_open(fd: int) -> bool:
    """Whether `fd` is still open: the one that listed the directory is closed by now."""
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _files_left(before: frozenset[int], after: frozenset[int]) -> list[str]:
    """The descriptors opened since, when more are open than before: a connection pool that closed one connection
    and opened another (Dagster's storage pool swaps an overflow connection for its kept one) left nothing."""
    if len(after) <= len(before):
        return []
    return [f"{fd} -> {_target(fd)}" for fd in sorted(after - before)]


def _target(fd: int) -> str:
    try:
        return os.readlink(f"{_FDS}/{fd}")
    except OSError:
        return "?"


_PARTS = (
    _Part("environment variables", lambda: dict(os.environ), _restore_environment, _changed_keys),
    _Part("loggers", _read_loggers, _restore_loggers, _logger_changes),
    _Part(
        "logging",
        lambda: logging.root.manager.disable,
        lambda before, after: logging.disable(before),
        _changed_value("logging.disable"),
    ),
    _Part(
        "garbage collector",
        lambda: (gc.isenabled(), gc.get_threshold()),
        _restore_gc,
        _changed_value("enabled state or thresholds"),
    ),
    _Part("signal handlers", _read_signals, _restore_signals, _signal_changes),
    _Part("working directory", os.getcwd, lambda before, after: os.chdir(before), _changed_value("changed")),
    _Part("umask", _read_umask, lambda before, after: os.umask(before), _changed_value("changed")),
    _Part(
        "sys.path",
        lambda: list(sys.path),
        lambda before, after: sys.path.__setitem__(slice(None), before),
        _changed_value("changed"),
    ),
    _Part("warning filters", lambda: list(warnings.filters), _restore_warnings, _changed_value("changed")),
    _Part(
        "interpreter settings",
        lambda: (sys.getrecursionlimit(), sys.getswitchinterval(), socket.getdefaulttimeout()),
        _restore_interpreter,
        _changed_value("recursion limit, switch interval or default socket timeout"),
    ),
    # Reported, not undone: a thread cannot be stopped from outside, and a descriptor closed under the
    # object that owns it would be reused by the next file opened.
    _Part("threads still running", _threads, None, _threads_left),
)


class ProcessState:
    """The state of this process, as the parts above read it; with `files`, its open descriptors too, but for
    those `kept` names (descriptors the process keeps open from one piece of work to the next on purpose)."""

    def __init__(self, *, files: bool = True, kept: Callable[[], frozenset[int]] = frozenset) -> None:
        left = _Part(
            "file descriptors still open", _open_files, None, lambda before, after: _files_left(before, after - kept())
        )
        self._parts = (*_PARTS, left) if files else _PARTS
        self._readings = [part.read() for part in self._parts]

    def restore(self) -> dict[str, list[str]]:
        """Put back every part that changed since; what changed, by part (the unrestorable ones too)."""
        changed: dict[str, list[str]] = {}
        for part, before in zip(self._parts, self._readings, strict=True):
            after = part.read()
            if changes := part.changes(before, after):
                changed[part.name] = changes
                if part.restore is not None:
                    part.restore(before, after)
        return changed
