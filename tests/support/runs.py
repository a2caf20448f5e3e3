"""What the orchestrator knows about runs, held in memory, for the core tests of trigger takes.

The sensor tests hand the takes a real Dagster instance's runs; a core test says which run keys
have a run, and which pipelines are busy, and sees what the take asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KnownRuns:
    """`keys`: the run keys that have a run (every key, with `every_run`); `busy`: pipelines busy."""

    keys: set[str] = field(default_factory=set)
    busy: frozenset[int] = frozenset()
    every_run: bool = False
    asked: list[str] = field(default_factory=list)
    """The run keys the take asked about, in order."""

    def seen(self, fires: Sequence[Any]) -> set[str]:
        keys = [fire.run_key for fire in fires]
        self.asked += keys
        return set(keys) if self.every_run else set(keys) & self.keys


def every_run() -> KnownRuns:
    """Every fire ever taken has its run, as when the sensors' ticks all returned."""
    return KnownRuns(every_run=True)
