"""A crawl chain's checkpoint on a real (local) blob store: chunks per run, what they hold, when a
continuation is refused for making no progress, and that finishing the crawl clears it."""

from __future__ import annotations

import re

import pytest

from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.run.checkpoint import Checkpoint, checkpoint_prefix
from pipelines_dagster.core.storage.blob import InvalidBlobKeyError
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore

ROOT = "root-run"
PREFIX = checkpoint_prefix(workspace_id=1, pipeline_id=2, root_run_id=ROOT)


def record(n: int) -> CrawlRecord:
    return CrawlRecord(url=f"https://example.com/{n}", status="success", content=f"page {n}")


@pytest.fixture
def store(tmp_path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def test_records_are_stored_in_chunks_each_run_reads_what_the_chain_stored_before_it(store):
    first = Checkpoint(store, PREFIX, ROOT, every_seconds=3600, every_records=2)
    for n in range(5):
        first.add(record(n))
    # Two whole chunks; the fifth record waits for the next chunk or the flush when the run stops.
    assert first.written == 4
    assert [r.url for r in Checkpoint(store, PREFIX, "reader").records()] == [record(n).url for n in range(4)]
    first.flush()
    assert first.written == 5

    second = Checkpoint(store, PREFIX, "continuation-1", every_seconds=3600, every_records=2)
    assert second.writers == [ROOT]
    assert list(second.records()) == [record(n) for n in range(5)]
    second.add(record(5))
    second.flush()
    assert Checkpoint(store, PREFIX, "reader").writers == [ROOT, "continuation-1"]

    second.clear()
    assert list(Checkpoint(store, PREFIX, "reader").records()) == [] and list(store.list(PREFIX)) == []


def test_a_chunk_is_stored_once_enough_time_passed_even_with_few_records(store):
    checkpoint = Checkpoint(store, PREFIX, ROOT, every_seconds=0, every_records=1000)
    checkpoint.add(record(1))
    assert checkpoint.written == 1


def test_a_continuation_of_a_continuation_that_stored_nothing_is_stalled(store):
    root = Checkpoint(store, PREFIX, ROOT, every_seconds=3600, every_records=1)
    root.add(record(1))
    # The first continuation of the root may go on whatever the root stored.
    assert not Checkpoint(store, PREFIX, "c1").stalled(parent_run_id=ROOT, root_run_id=ROOT)
    # The first run of a chain continues nothing.
    assert not Checkpoint(store, PREFIX, ROOT).stalled(parent_run_id=None, root_run_id=ROOT)
    # c1 stored nothing before it stopped: c2, continuing it, would stop as it did.
    assert Checkpoint(store, PREFIX, "c2").stalled(parent_run_id="c1", root_run_id=ROOT)
    c1 = Checkpoint(store, PREFIX, "c1", every_seconds=3600, every_records=1)
    c1.add(record(2))
    assert not Checkpoint(store, PREFIX, "c2").stalled(parent_run_id="c1", root_run_id=ROOT)


def test_a_chain_where_no_run_stored_anything_is_stalled_after_its_first_continuation(store):
    assert not Checkpoint(store, PREFIX, "c1").stalled(parent_run_id=ROOT, root_run_id=ROOT)
    assert Checkpoint(store, PREFIX, "c2").stalled(parent_run_id="c1", root_run_id=ROOT)


def test_a_run_id_that_is_not_one_blob_key_segment_is_refused():
    with pytest.raises(InvalidBlobKeyError, match=re.escape("run id '../x'")):
        checkpoint_prefix(workspace_id=1, pipeline_id=2, root_run_id="../x")
