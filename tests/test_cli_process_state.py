"""The pool guard's reading of open descriptors: a file a run leaves open is named; a connection pool that closed
one connection and opened another (as Dagster's storage pool swaps connections) left nothing open."""

from __future__ import annotations

import os
import socket

from pipelines_dagster.cli.process_state import ProcessState


def test_a_descriptor_left_open_is_named_and_a_swapped_one_is_not() -> None:
    kept = socket.socket()
    state = ProcessState()
    swapped = socket.socket()  # another opened (a new number), then the first closed: as many open as before
    kept.close()
    try:
        assert "file descriptors still open" not in state.restore()
        state = ProcessState()
        left = open(os.devnull, "rb")  # noqa: SIM115  # left open on purpose
        try:
            [named] = state.restore()["file descriptors still open"]
            assert named.endswith(f"-> {os.devnull}")
        finally:
            left.close()
    finally:
        swapped.close()


def test_descriptors_kept_on_purpose_are_not_named() -> None:
    state_kept: list[int] = []
    state = ProcessState(kept=lambda: frozenset(state_kept))
    left = open(os.devnull, "rb")  # noqa: SIM115  # kept on purpose, and said so
    try:
        state_kept.append(left.fileno())
        assert "file descriptors still open" not in state.restore()
    finally:
        left.close()
