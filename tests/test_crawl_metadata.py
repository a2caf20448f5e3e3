"""Typed crawl metadata: what the crawl step writes is what every reader gets back."""

from __future__ import annotations

import dagster as dg

from pipelines_dagster.crawl_metadata import CrawlMetadata


def test_what_is_written_reads_back_the_same():
    written = CrawlMetadata(
        pipeline_id=7,
        workspace_id=3,
        urls_attempted=4,
        urls_succeeded=3,
        urls_empty=0,
        urls_failed=1,
        urls_unchanged=2,
        bytes=1234,
        blob_key="runs/3/7/r.jsonl",
        blob_url="file:///b/runs/3/7/r.jsonl",
        charged_micros=3000,
        started_at=1_700_000_000.5,
        duration_seconds=1.25,
        attempt=2,
        retry_policy="linear backoff",
        scheduled_for=None,
        pages_discovered=40,
        discovery_truncated=True,
    )
    metadata = written.to_metadata()
    assert isinstance(metadata["blob_url"], dg.UrlMetadataValue)
    assert isinstance(metadata["started_at"], dg.TimestampMetadataValue)
    # As the event log hands it back: every value wrapped in Dagster's metadata types.
    stored = {
        key: value
        if isinstance(value, dg.MetadataValue)
        else dg.MetadataValue.bool(value)
        if isinstance(value, bool)
        else dg.MetadataValue.text(value)
        if isinstance(value, str)
        else dg.MetadataValue.int(value)
        if isinstance(value, int)
        else dg.MetadataValue.float(value)
        for key, value in metadata.items()
    }
    assert CrawlMetadata.read(stored) == written
    assert CrawlMetadata.read(metadata) == written


def test_keys_an_older_run_never_wrote_or_wrote_with_another_type_read_as_none():
    read = CrawlMetadata.read(
        {
            "urls_attempted": dg.MetadataValue.int(5),
            "charged_micros": "lots",
            "blob_key": "",
            "attempt": True,
            "discovery_truncated": "yes",
            "failed_urls": dg.MetadataValue.md("none"),
        }
    )
    assert read == CrawlMetadata(urls_attempted=5)
