"""The metadata of a `crawl_results` materialization, typed: written once by the crawl step, read by
history, the demo, the checks and the maintenance schedule through `CrawlMetadata.read`; and of the
observations of a crawl under way (`CrawlProgressMetadata`), which history reads while the run lasts.

A key renamed here is renamed for every reader; a key an older run never wrote reads as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

import dagster as dg

from pipelines_dagster.core.crawl.health import CrawlHealth, judge_crawl, success_threshold
from pipelines_dagster.runs import CRAWL_RESULTS_ASSET

CRAWL_RESULTS = dg.AssetKey(CRAWL_RESULTS_ASSET)
IDS = frozenset({"pipeline_id", "workspace_id"})
"""Metadata that names a row: written as text (Dagster plots numbers), read back as ints."""

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class CrawlMetadata:
    pipeline_id: int | None = None
    pipeline_name: str | None = None
    """The pipeline's name when it crawled: what the UI shows beside the partition key (the id)."""
    workspace_id: int | None = None
    urls_attempted: int | None = None
    urls_succeeded: int | None = None
    urls_empty: int | None = None
    urls_failed: int | None = None
    urls_unchanged: int | None = None
    bytes: int | None = None
    blob_key: str | None = None
    blob_url: str | None = None
    charged_micros: int | None = None
    started_at: float | None = None
    """Unix seconds when the crawl began (a batch member's start inside its run)."""
    duration_seconds: float | None = None
    attempt: int | None = None
    retry_policy: str | None = None
    previous_crawl_run_id: str | None = None
    scheduled_for: str | None = None
    pages_discovered: int | None = None
    """A site crawl's pages found by discovery (sitemaps and links); absent for a list crawl."""
    discovery_truncated: bool | None = None
    """A site crawl stopped discovering at max pages, so pages it did not find may still exist."""
    pages_duplicate: int | None = None
    """A site crawl's pages fetched but not stored, as copies of stored pages (redirects, rel=canonical)."""
    pages_links_capped: int | None = None
    """A site crawl's pages with more links than it follows from one page (10,000: the first are followed)."""
    sitemaps_skipped: int | None = None
    """A site crawl's sitemaps found but not read (not there, not a sitemap); the run log says why."""
    sitemaps_truncated: int | None = None
    """A site crawl's sitemaps longer than their cap (50 MiB), read to it; the run log names each."""
    pages_resumed: int | None = None
    """Pages an earlier run of this crawl stored before it was stopped (past its maximum runtime, its
    process killed), replayed from its checkpoint, not fetched or charged again; absent when none."""
    resumed_from_run_id: str | None = None
    """The first run of the crawl this run continued (Dagster's root run of its retries)."""
    start_urls: int | None = None
    """A site crawl's start URLs; absent for a list crawl."""
    start_urls_failed: int | None = None
    min_success_ratio: float | None = None
    """The pipeline's threshold the crawl was judged at."""
    crawl_healthy: bool | None = None
    """The verdict (`core.crawl.health`): an unhealthy crawl removes and archives nothing and fails its run."""
    crawl_complete: bool | None = None
    """Discovery did not stop at max pages: pages the crawl did not reach are removed and archived."""
    crawl_health: str | None = None
    """The verdict in a sentence."""
    pages_per_second: float | None = None
    """Pages fetched per second of crawling (not counting the wait for locks, nor pages resumed)."""
    rate_limited_by: str | None = None
    """What limited the crawl's rate (a robots.txt Crawl-delay, the shared host budget, concurrency); absent when
    nothing held its requests back."""
    worker: str | None = None
    """The Celery worker (NAME@HOST) that executed the run, under the Celery profile; absent for a run in a process
    of its own."""
    render: str | None = None
    """The connector's render setting the crawl ran under: never, auto or always."""
    pages_rendered: int | None = None
    """Pages whose text was read from the page as the browser rendered it; absent under `never`."""
    render_seconds: float | None = None
    """Their rendering time, summed over pages (which render side by side); absent under `never`."""
    pages_html: int | None = None
    """Pages by kind, whatever their status (a page that failed before its type was known has none): HTML and
    XHTML pages, plain-text pages, PDF and DOCX documents; absent for a crawl an older release stored."""
    pages_text: int | None = None
    pages_pdf: int | None = None
    pages_docx: int | None = None
    user_agent: str | None = None
    """The user agent the crawl sent (and read robots.txt as): the connector's own, else the crawler's."""
    robots: str | None = None
    """obey, or ignore: robots.txt was not read on `robots_ignored_on`, hosts the workspace owns."""
    robots_ignored_on: str | None = None
    """The hosts fetched without robots.txt, comma-separated; absent when the crawl obeyed it everywhere."""

    def to_metadata(self) -> dict[str, Any]:
        """The materialization metadata, in Dagster's types where the UI renders them (a link, a time)."""
        rendered: dict[str, Any] = {}
        for name, value in asdict(self).items():
            if value is None:
                continue
            if name in IDS:
                # Text, not a number: Dagster plots numeric metadata, and an id is no quantity.
                value = dg.MetadataValue.text(str(value))
            elif name == "blob_url":
                value = dg.MetadataValue.url(value)
            elif name == "started_at":
                value = dg.MetadataValue.timestamp(value)
            rendered[name] = value
        return rendered

    @classmethod
    def read(cls, metadata: Mapping[str, dg.MetadataValue | Any]) -> CrawlMetadata:
        """From a materialization's metadata (Dagster's values or plain ones, as a step returns them)."""
        return _read(cls, metadata)

    @property
    def verdict(self) -> CrawlHealth | None:
        """The health judged when the crawl was stored; None for a crawl an older release stored."""
        if self.crawl_healthy is None or self.crawl_complete is None or self.crawl_health is None:
            return None
        return CrawlHealth(healthy=self.crawl_healthy, complete=self.crawl_complete, why=self.crawl_health)

    def health(self, pipeline_config: Mapping[str, Any]) -> CrawlHealth:
        """The recorded verdict, which every reader follows; a crawl stored before verdicts were
        recorded is judged from its counts at the pipeline's threshold."""
        return self.verdict or judge_crawl(
            attempted=self.urls_attempted or 0,
            succeeded=self.urls_succeeded or 0,
            failed=self.urls_failed or 0,
            threshold=success_threshold(pipeline_config),
            truncated=bool(self.discovery_truncated),
        )

    @classmethod
    def of_event(cls, record: dg.EventLogRecord | None) -> CrawlMetadata:
        materialization = record.asset_materialization if record else None
        return cls.read(materialization.metadata if materialization else {})


PROGRESS_METADATA = "crawl_progress"
"""The metadata key that makes an observation of `crawl_results` a crawl's progress: the sentence the run log shows."""


@dataclass(frozen=True, kw_only=True)
class CrawlProgressMetadata:
    """How far a crawl under way has got, as the crawl step observes it once per progress interval (10 s)."""

    crawl_progress: str | None = None
    urls_attempted: int | None = None
    urls_succeeded: int | None = None
    urls_empty: int | None = None
    urls_failed: int | None = None
    urls_total: int | None = None
    """A list's URLs, or the pages a site crawl discovered so far."""
    pages_per_second: float | None = None
    eta_seconds: float | None = None
    """Seconds until the total is done at the rate so far; absent before there is a rate."""
    elapsed_seconds: float | None = None
    rate_limited_by: str | None = None

    def to_metadata(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if value is not None}

    @classmethod
    def read(cls, metadata: Mapping[str, dg.MetadataValue | Any]) -> CrawlProgressMetadata | None:
        """From an observation's metadata; None when the observation is not a crawl's progress."""
        return _read(cls, metadata) if PROGRESS_METADATA in metadata else None


def _read(cls: type[T], metadata: Mapping[str, dg.MetadataValue | Any]) -> T:
    """A metadata dataclass from Dagster's values or plain ones (as a step returns them), each field
    checked against its type: what does not fit (a run written by another version) reads as None."""
    values: dict[str, Any] = {
        key: value.value if isinstance(value, dg.MetadataValue) else value for key, value in metadata.items()
    }
    for key in IDS & values.keys():
        # Text since ids stopped being plotted; an int in what older releases wrote.
        if isinstance(values[key], str) and values[key].isascii() and values[key].isdigit():
            values[key] = int(values[key])
    return cls(
        **{
            field.name: values[field.name]
            for field in fields(cls)  # type: ignore[arg-type]  # cls is one of this module's dataclasses
            if field.name in values and _fits(values[field.name], str(field.type))
        }
    )


def _fits(value: Any, annotation: str) -> bool:
    """Whether a stored value has its field's type; anything else (a run written by another version) reads as None."""
    if annotation.startswith("bool"):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if annotation.startswith("int"):
        return isinstance(value, int)
    if annotation.startswith("float"):
        return isinstance(value, int | float)
    return isinstance(value, str) and value != ""


@dataclass(frozen=True)
class StoredCrawl:
    """A partition's newest crawl: the run that stored it and its metadata."""

    run_id: str
    metadata: CrawlMetadata

    @property
    def blob_key(self) -> str | None:
        return self.metadata.blob_key


def latest_crawl(instance: dg.DagsterInstance, partition_key: str) -> StoredCrawl | None:
    """The partition's newest crawl_results materialization, from the event log; None before the first."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=CRAWL_RESULTS, asset_partitions=[partition_key]), limit=1
    ).records
    return StoredCrawl(records[0].run_id, CrawlMetadata.of_event(records[0])) if records else None
