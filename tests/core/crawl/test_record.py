"""The crawl record: what the run engine stores per URL is what every reader gets back."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from pipelines_dagster.core.crawl.record import CrawlRecord, CrawlRecordError, StoredPage, read_crawl, write_crawl
from pipelines_dagster.core.crawl.types import CrawlOutcome
from pipelines_dagster.core.storage.local_blobs import LocalBlobStore

FETCHED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def outcome(url: str, **fields) -> CrawlOutcome:
    values = {"final_url": url, "status": "success", "fetched_at": FETCHED, "elapsed": 0.1234, "attempts": 1}
    return CrawlOutcome(url=url, **(values | fields))


def test_records_round_trip_through_the_blob_as_one_json_line_each(tmp_path):
    store = LocalBlobStore(tmp_path)
    records = [
        CrawlRecord.of_outcome(
            outcome(
                "https://a.example/1",
                content="# One ✓",
                metadata={"title": "One"},
                content_hash="h1",
                etag='"e"',
                links=("https://a.example/2",),
                canonical="https://a.example/1",
            )
        ),
        CrawlRecord.of_outcome(outcome("https://a.example/2", status="failed", http_status=404, error="HTTP 404")),
    ]
    size = write_crawl(store, "run/result.jsonl", records)
    raw = b"".join(store.open_stream("run/result.jsonl"))
    assert size == len(raw) and raw.count(b"\n") == 2
    assert orjson.loads(raw.splitlines()[0])["fetched_at"] == FETCHED.isoformat()
    assert list(read_crawl(store, "run/result.jsonl")) == records


def test_an_unchanged_page_carries_the_previous_content_and_a_changed_one_its_own():
    unchanged = outcome("https://a.example/u", unchanged=True, content="", metadata={})
    kept = StoredPage(content="old text", metadata={"title": "Old"}, links=["https://a.example/l"], canonical=None)
    carried = CrawlRecord.of_outcome(unchanged, previous=kept)
    assert (carried.content, carried.metadata, carried.unchanged) == ("old text", {"title": "Old"}, True)
    assert carried.links == ["https://a.example/l"]
    assert CrawlRecord.of_outcome(unchanged).content == ""  # nothing stored before: nothing to carry
    fresh = CrawlRecord.of_outcome(outcome("https://a.example/c", content="new"), previous=StoredPage(content="old"))
    assert fresh.content == "new"
    assert fresh.elapsed_seconds == 0.123


def test_a_line_written_by_an_older_release_reads_with_defaults_and_ignores_unknown_keys():
    record = CrawlRecord.read({"url": "https://a.example/x", "status": "empty", "content": None, "legacy": 1})
    # Older releases crawled HTML, XHTML and plain text alone and wrote no kind: such a page reads as HTML.
    assert record == CrawlRecord(url="https://a.example/x", status="empty", kind="html")
    assert not record.succeeded and record.content == "" and record.metadata == {}
    assert CrawlRecord.read({"url": "https://a.example/x", "status": "failed"}).kind is None


@pytest.mark.parametrize(("stored", "read"), [("pdf", "pdf"), ("docx", "docx"), (None, None), ("xlsx", None)])
def test_a_record_says_what_kind_of_page_it_was(stored, read):
    line = orjson.loads(orjson.dumps(CrawlRecord(url="https://a.example/m.pdf", status="success", kind=stored)))
    assert CrawlRecord.read(line).kind == read


def test_an_unchanged_page_keeps_its_kind_when_its_304_does_not_say_it():
    kept = StoredPage(content="manual text", kind="pdf")
    assert CrawlRecord.of_outcome(outcome("https://a.example/m.pdf", unchanged=True), previous=kept).kind == "pdf"
    said = outcome("https://a.example/m.pdf", unchanged=True, kind="docx")
    assert CrawlRecord.of_outcome(said, previous=kept).kind == "docx"
    assert CrawlRecord.of_outcome(outcome("https://a.example/p", kind="html")).outcome().kind == "html"


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ({"status": "success"}, "'url'"),
        ({"url": 7, "status": "success"}, "'url'"),
        ({"url": "https://a.example/x"}, "'status'"),
        ({"url": "https://a.example/x", "status": "done"}, "'status'"),
    ],
)
def test_a_line_that_is_not_a_crawl_record_is_refused_naming_the_field(line, field):
    with pytest.raises(CrawlRecordError, match=field):
        CrawlRecord.read(line)
