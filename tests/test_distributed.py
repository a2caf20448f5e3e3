"""The Celery profile's launcher, its pure parts: when a worker that stopped answering pings counts as gone.
The launcher itself, with real workers, a broker and a daemon, is tested end to end in test_e2e_celery.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipelines_dagster.distributed import WorkerLiveness

GRACE, REUSE = 15.0, 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pings(*answers: set[str] | None) -> Iterator[set[str] | None]:
    yield from answers


def liveness(clock: Clock, answers: Iterator[set[str] | None]) -> WorkerLiveness:
    return WorkerLiveness(lambda: next(answers), grace=GRACE, reuse=REUSE, clock=clock)


def test_a_worker_counts_as_gone_only_after_missing_every_ping_for_the_grace():
    clock = Clock()
    alive = liveness(clock, pings({"a@h", "b@h"}, {"a@h"}, {"a@h"}, {"a@h"}))
    assert alive.silent_for("b@h") is None
    clock.now += 5
    assert alive.silent_for("b@h") is None  # missing for 0 s
    clock.now += 5
    assert alive.silent_for("b@h") is None  # 5 s
    clock.now += 10
    assert alive.silent_for("b@h") == pytest.approx(15)
    assert alive.silent_for("a@h") is None


def test_one_ping_answers_for_every_run_checked_in_a_poll():
    clock = Clock()
    sent: list[float] = []

    def ping() -> set[str]:
        sent.append(clock.now)
        return {"a@h"}

    alive = WorkerLiveness(ping, grace=GRACE, reuse=REUSE, clock=clock)
    for _ in range(50):
        alive.silent_for("a@h")
    clock.now += REUSE
    alive.silent_for("a@h")
    assert sent == [1000.0, 1000.0 + REUSE]


def test_an_answer_starts_the_count_again():
    clock = Clock()
    alive = liveness(clock, pings(set(), {"b@h"}, set(), set()))
    assert alive.silent_for("b@h") is None
    clock.now += 10
    assert alive.silent_for("b@h") is None  # it answered
    clock.now += 10
    assert alive.silent_for("b@h") is None  # missing since now, not since the first ping
    clock.now += GRACE
    assert alive.silent_for("b@h") == pytest.approx(GRACE)


def test_a_ping_that_could_not_be_sent_fails_no_worker():
    # The broker restarting: no ping goes out, so no worker's silence is counted across it.
    clock = Clock()
    alive = liveness(clock, pings(set(), None, None, set()))
    assert alive.silent_for("b@h") is None
    for _ in range(2):
        clock.now += GRACE
        assert alive.silent_for("b@h") is None
    clock.now += REUSE
    assert alive.silent_for("b@h") is None  # missing again from now
