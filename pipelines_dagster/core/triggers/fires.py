"""What a trigger sensor's tick takes from the app database: fires, within a budget.

Each kind of trigger (schedule, webhook delivery, domain event) has a `take_batch` that claims a
batch of rows in one transaction and returns the fires owed (each a run key plus run tags);
`take_within` repeats it until nothing is left or the tick's budget is spent.

A take commits its marks before the sensor returns the run requests, so a tick that dies in
between (daemon killed, code server restarted) leaves rows marked with no run. Each take also
offers such fires again: a fire marked more than `GRACE` ago whose run key has no run in `Runs`
is returned once more under the same run key, which Dagster starts at most once. Marks wait for
their run in a column of their own (`awaiting_run`, `awaiting_run_for`), cleared once the run is
seen, so a tick looks only at marks still waiting, never at every row ever taken.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy.orm import Session, sessionmaker


class Fire(Protocol):
    """One run a trigger owes a pipeline: its run key and tags."""

    @property
    def pipeline_id(self) -> int: ...

    @property
    def run_key(self) -> str: ...

    @property
    def tags(self) -> Mapping[str, str]: ...


FireT = TypeVar("FireT", bound=Fire)

GRACE = timedelta(minutes=5)
"""How long a marked fire waits for its run before a tick offers it again: well past Dagster's
60 s sensor evaluation timeout, after which the tick that marked it has returned or is dead."""


class Runs(Protocol):
    """What the orchestrator knows about runs, as a take needs it (the sensor hands in Dagster's)."""

    @property
    def busy(self) -> Set[int]:
        """Pipelines with a run queued or in progress, read before the take."""
        ...

    def seen(self, fires: Sequence[Any]) -> set[str]:
        """The run keys, among these fires', that have a run."""
        ...


@dataclass(frozen=True, kw_only=True)
class Budget:
    """How much one tick takes: rows per batch (a transaction each), rows in all (None: no cap), and seconds."""

    batch_size: int = 500
    max_rows: int | None = 5_000
    # Well inside Dagster's default 60 s sensor evaluation timeout.
    seconds: float = 20.0


DEFAULT_BUDGET = Budget()


@dataclass(kw_only=True)
class Taken(Generic[FireT]):
    """What a take claimed: the fires owed, the rows claimed, and how many of those fire nothing."""

    fires: list[FireT] = field(default_factory=list)
    rows: int = 0
    skipped: int = 0
    """Rows claimed that owe no run: a disabled trigger or pipeline, or an event nobody subscribed is concerned by."""
    disabled_pipelines: set[int] = field(default_factory=set)
    """Pipelines whose enabled trigger fired while the pipeline is disabled: into nothing, no run."""
    busy: list[str] = field(default_factory=list)
    """Run keys of fires dropped because their pipeline was busy (schedules, which do not catch up)."""
    held: int = 0
    """Rows left pending because a pipeline they fire is busy: a later tick takes them (webhooks, events)."""
    again: list[str] = field(default_factory=list)
    """Run keys of fires marked more than GRACE ago with no run, offered again (also in `fires`)."""

    def add(self, other: Taken[FireT]) -> None:
        self.fires += other.fires
        self.rows += other.rows
        self.skipped += other.skipped
        self.disabled_pipelines |= other.disabled_pipelines
        self.busy += other.busy
        self.held += other.held
        self.again += other.again


def take_within(
    take_batch: Callable[..., Taken[FireT]],
    sessions: sessionmaker[Session],
    *,
    now: datetime | None,
    budget: Budget,
) -> Taken[FireT]:
    """Take batches until none is left or the budget is spent; each batch commits on its own."""
    moment = now or datetime.now(UTC)
    deadline = time.monotonic() + budget.seconds
    total: Taken[FireT] = Taken()
    while time.monotonic() < deadline:
        left = None if budget.max_rows is None else budget.max_rows - total.rows
        if left is not None and left <= 0:
            break
        limit = budget.batch_size if left is None else min(budget.batch_size, left)
        batch = take_batch(sessions, limit=limit, now=moment)
        total.add(batch)
        # Fewer than asked: nothing else pending, or the rest locked by a concurrent tick that takes it.
        if batch.rows < limit:
            break
    return total
