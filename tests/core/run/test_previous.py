"""PreviousCrawl: the last crawl's validators and stored pages, spooled to a file and read back in any order."""

from __future__ import annotations

import random

from pipelines_dagster.core.crawl.record import CrawlRecord, StoredPage
from pipelines_dagster.core.crawl.types import PreviousFetch
from pipelines_dagster.core.run.previous import PreviousCrawl


def record(url: str, status: str = "success", **fields) -> CrawlRecord:
    return CrawlRecord(url=url, status=status, **fields)


def test_every_stored_page_comes_back_exactly_in_any_order():
    pages = {
        f"https://docs.example.com/{n}": (
            f"# Page {n}\n\nünïcode ✓ {'text ' * (n * 997 % 5000)}",
            {"title": f"P{n}", "n": n},
        )
        for n in range(300)
    }
    previous = PreviousCrawl(
        record(url, content=content, metadata=metadata) for url, (content, metadata) in pages.items()
    )
    try:
        urls = list(pages)
        random.Random(7).shuffle(urls)
        for url in urls:
            assert previous.stored(url) == StoredPage(content=pages[url][0], metadata=pages[url][1])
        assert previous.stored(urls[0]) == StoredPage(
            content=pages[urls[0]][0], metadata=pages[urls[0]][1]
        )  # a second read of the same page
    finally:
        previous.close()


def test_only_successes_are_kept_and_give_hints():
    previous = PreviousCrawl(
        [
            record(
                "https://a.example/ok",
                content="text",
                metadata={},
                etag='"v1"',
                last_modified="Mon, 01 Jan 2024 00:00:00 GMT",
                raw_hash="raw",
                content_hash="sum",
            ),
            record("https://a.example/gone", status="failed", error="HTTP 404"),
            record("https://a.example/blank", status="empty"),
        ]
    )
    try:
        assert previous.hints == {
            "https://a.example/ok": PreviousFetch(
                etag='"v1"', last_modified="Mon, 01 Jan 2024 00:00:00 GMT", raw_hash="raw", content_hash="sum"
            )
        }
        assert previous.stored("https://a.example/ok") == StoredPage(content="text")
        assert previous.stored("https://a.example/gone") is None
        assert previous.stored("https://a.example/blank") is None
        assert previous.stored("https://a.example/never-crawled") is None
    finally:
        previous.close()


def test_a_url_stored_twice_keeps_its_last_record_and_missing_fields_default():
    previous = PreviousCrawl(
        [
            record("https://a.example/x", content="old", metadata={"v": 1}),
            record("https://a.example/x", content="new", metadata={"v": 2}),
            record("https://a.example/bare"),
        ]
    )
    try:
        assert previous.stored("https://a.example/x") == StoredPage(content="new", metadata={"v": 2})
        assert previous.stored("https://a.example/bare") == StoredPage()
    finally:
        previous.close()


def test_no_previous_crawl_knows_nothing():
    for records in (None, [], [record("https://a.example/x", status="failed")]):
        previous = PreviousCrawl(records)
        assert previous.hints == {} and previous.stored("https://a.example/x") is None
        previous.close()
