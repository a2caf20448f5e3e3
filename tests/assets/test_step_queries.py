"""What one pipeline of a batch run asks of the app database, the event log and the blob store.

A step carries the pipeline row it loaded and the crawl it stored to the KB index, the page-change
timeline and the checks; these pin that it does, so a reload or an event-log lookup that creeps
back in fails here. Counted on the real stack (SQLite + local blobs, PostgreSQL + S3 + Redis).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

import pipelines_dagster.batch as batch
from pipelines_dagster.assets.after_crawl import PartitionSteps
from pipelines_dagster.core.storage.blob import BlobStore
from tests.assets.conftest import Stack
from tests.assets.test_batch import materialized, partition_events, run_batch

PIPELINE_ROW = re.compile(r"^\s*SELECT\b.*\bFROM pipelines\b", re.IGNORECASE | re.DOTALL)
# The event log's and run storage's reads (and nothing that writes): what a step asks Dagster.
READS = ("fetch_", "get_", "all_logs", "has_")


class StepCounts:
    """Statements, pipeline-row SELECTs, Dagster storage reads and blob reads, by phase: `member <id>`
    (all of one batch member, crawl included) and `after <id>` (what follows its crawl). Only what the
    code under a phase runs counts, not what Dagster does with the events it yields."""

    def __init__(self, app_url: str) -> None:
        self.app_url = app_url
        self.active: list[str] = []
        self.statements: Counter[str] = Counter()
        self.pipeline_rows: Counter[str] = Counter()
        self.dagster_reads: dict[str, Counter[str]] = defaultdict(Counter)
        self.blob_reads: dict[str, Counter[str]] = defaultdict(Counter)

    def statement(self, conn: sa.Connection, statement: str) -> None:
        if conn.engine.url.render_as_string(hide_password=False) != self.app_url:
            return
        for phase in self.active:
            self.statements[phase] += 1
            self.pipeline_rows[phase] += bool(PIPELINE_ROW.match(statement))

    def dagster_read(self, name: str) -> None:
        for phase in self.active:
            self.dagster_reads[phase][name] += 1

    def blob_read(self, key: str) -> None:
        for phase in self.active:
            self.blob_reads[phase][key] += 1

    def summary(self, phase: str) -> str:
        return (
            f"{phase}: {self.statements[phase]} statements, {self.pipeline_rows[phase]} pipeline-row SELECTs, "
            f"Dagster reads {dict(self.dagster_reads[phase])}, blob reads {sorted(self.blob_reads[phase].values())}"
        )

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.active.append(name)
        try:
            yield
        finally:
            self.active.remove(name)

    def generator(
        self, phase: Callable[..., str], function: Callable[..., Iterator[Any]]
    ) -> Callable[..., Iterator[Any]]:
        """`function` counted under the phase its arguments name while its own code runs, not while its
        caller handles what it yields."""

        def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
            name, events = phase(*args, **kwargs), function(*args, **kwargs)
            while True:
                with self.phase(name):
                    try:
                        event = next(events)
                    except StopIteration:
                        return
                yield event

        return counted


@pytest.fixture
def counts(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[StepCounts]:
    counts = StepCounts(stack.url)

    def on_statement(conn, cursor, statement, parameters, context, executemany) -> None:
        counts.statement(conn, statement)

    member = counts.generator(lambda context, pipeline, *_: f"member {pipeline.pipeline_id}", batch._run_member)
    monkeypatch.setattr(batch, "_run_member", member)
    after = counts.generator(lambda steps, *_, **__: f"after {steps.key}", PartitionSteps.after_crawl)
    monkeypatch.setattr(PartitionSteps, "after_crawl", after)
    for storage in (stack.instance.event_log_storage, stack.instance.run_storage):
        for name in dir(storage):
            method = getattr(storage, name)
            if name.startswith(READS) and callable(method):
                monkeypatch.setattr(storage, name, _reading(counts, name, method))
    real_read = BlobStore.read_jsonl

    def read_jsonl(store: BlobStore, key: str) -> Iterator[dict[str, Any]]:
        counts.blob_read(key)
        return real_read(store, key)

    monkeypatch.setattr(BlobStore, "read_jsonl", read_jsonl)
    sa.event.listen(sa.Engine, "before_cursor_execute", on_statement)
    try:
        yield counts
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", on_statement)


def _reading(counts: StepCounts, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def read(*args: Any, **kwargs: Any) -> Any:
        counts.dagster_read(name)
        return method(*args, **kwargs)

    return read


# What follows a KB pipeline's first crawl of three pages, on each app database: the KB index (its
# pending rows, content and archiving), the content check and the timeline. SQLite begins every
# transaction with a statement of its own.
AFTER_CRAWL_STATEMENTS = {"sqlite": 22, "postgresql": 13}


def test_a_batch_member_loads_its_pipeline_once_and_never_asks_the_event_log_for_the_crawl_it_stored(
    stack: Stack, counts: StepCounts
):
    kb = stack.pipeline(stack.site(3, prefix="/kb"))
    raw = stack.pipeline(stack.site(2, prefix="/raw"), save_to_kb=False, folder=None)
    keys = {pipeline_id: stack.key(pipeline_id) for _, pipeline_id in (kb, raw)}
    result = run_batch(stack, [kb, raw])
    assert result.success
    for (_, pipeline_id), blob_reads in ((kb, 3), (raw, 2)):
        member, after = f"member {pipeline_id}", f"after {keys[pipeline_id]}"
        summary = f"{counts.summary(member)}; {counts.summary(after)}"
        blob_key = materialized(partition_events(result, pipeline_id))["crawl_results"]["blob_key"]
        assert counts.pipeline_rows[member] == 1, summary
        # The previous crawl, whose validators the crawl's conditional GETs send; nothing about this one.
        assert counts.dagster_reads[member] == {"fetch_materializations": 1}, summary
        assert not counts.dagster_reads[after], summary
        # The blob check's read, which hands the KB index its URLs; the index's content; the timeline.
        assert counts.blob_reads[after] == {blob_key: blob_reads}, summary
    after = f"after {keys[kb[1]]}"
    assert counts.statements[after] <= AFTER_CRAWL_STATEMENTS[stack.engine.dialect.name], counts.summary(after)
