"""What a crawl tells its run while it works and after: start, progress and summary lines in the run log (naming
the pipeline and what limits the rate), its progress as observations history reads, Dagster's own metadata."""

from __future__ import annotations

import re

import dagster as dg
import pytest

from pipelines_dagster.core.crawl.types import CrawlerConfig
from pipelines_dagster.core.run import engine as run_engine
from pipelines_dagster.crawl_metadata import CrawlProgressMetadata
from tests.assets.conftest import Stack, materialization
from tests.support.web import Reply, page

PROGRESS = re.compile(r"pipeline (\d+): crawled (\d+) of (\d+) pages, (\d+) failed, [\d.]+ pages/s")


def run_log(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The run's log messages (not its structured events), in order."""
    return [entry.user_message for entry in instance.all_logs(run_id) if entry.dagster_event is None]


def progress_observations(instance: dg.DagsterInstance, run_id: str) -> list[CrawlProgressMetadata]:
    """The progress the run's crawl recorded, in order."""
    entries = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION)
    observations = [entry.asset_observation for entry in entries]
    return [
        progress
        for observation in observations
        if observation is not None and (progress := CrawlProgressMetadata.read(observation.metadata))
    ]


def test_a_slow_crawl_logs_its_progress_to_the_run_log(embedded: Stack, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(run_engine, "PROGRESS_EVERY_SECONDS", 0.2)
    # Four pages at a time per host, each answering after 0.6 s: about 3 s of crawling in all, longer than an
    # extraction worker takes to start on a loaded machine (at 0.25 s a page, CI saw every outcome held back by
    # the start and logged at once).
    for n in range(20):
        embedded.web.route(f"/slow{n}", page(f"Slow {n}", f"Paragraph {n}.", delay=0.6))
    urls = [embedded.web.url(f"/slow{n}") for n in range(20)] + [embedded.web.url("/missing")]
    workspace_id, pipeline_id = embedded.pipeline(urls)

    result = embedded.run(pipeline_id, workspace_id)

    assert result.success
    lines = [match.groups() for line in run_log(embedded.instance, result.run_id) if (match := PROGRESS.search(line))]
    assert len(lines) >= 2, run_log(embedded.instance, result.run_id)
    assert {(pipeline, total) for pipeline, _, total, _ in lines} == {(str(pipeline_id), "21")}
    done = [int(count) for _, count, _, _ in lines]
    assert done == sorted(done) and done[-1] <= 21
    assert all(int(failed) <= 1 for *_, failed in lines)

    # Each progress line is recorded once as an observation of the partition, its figures for history to read:
    # one write per progress interval, however many pages it covers.
    recorded = progress_observations(embedded.instance, result.run_id)
    assert [progress.urls_attempted for progress in recorded] == done
    log = run_log(embedded.instance, result.run_id)
    assert all(f"pipeline {pipeline_id}: {progress.crawl_progress}" in log for progress in recorded)
    last = recorded[-1]
    assert last.urls_total == 21 and last.urls_attempted == last.urls_succeeded + last.urls_empty + last.urls_failed
    assert last.pages_per_second > 0 and last.elapsed_seconds > 0
    assert last.eta_seconds is not None and (last.eta_seconds > 0) == (last.urls_attempted < 21)


def test_a_quick_crawl_logs_no_progress(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(3))
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success
    assert not any(PROGRESS.search(line) for line in run_log(embedded.instance, result.run_id))
    assert progress_observations(embedded.instance, result.run_id) == []


def test_the_run_log_starts_and_sums_up_the_crawl_naming_the_pipeline_and_its_crawl_delay(embedded: Stack):
    embedded.web.route("/robots.txt", Reply(body="User-agent: *\nCrawl-delay: 0.4\n", content_type="text/plain"))
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(5))
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success
    log = run_log(embedded.instance, result.run_id)
    named = f"pipeline {pipeline_id} (p): "
    assert (
        f"{named}crawl started (attempt 1): 5 URLs of its list, 4 requests per host and 16 in all at a time; as "
        f"{CrawlerConfig.user_agent!r}, obeying robots.txt"
    ) in log
    [summary] = [line for line in log if line.startswith(f"{named}crawl finished: ")]
    limited = f"rate limited by robots.txt Crawl-delay of {embedded.web.base_url} (0.4 s between requests): 4 requests"
    assert summary.startswith(f"{named}crawl finished: 5 attempted, 5 succeeded, 0 empty, 0 failed in ")
    assert limited in summary
    # The crawl's metadata keeps it, and the rate the summary gives: 5 pages over the crawl's seconds, which
    # the delay makes at least the 1.6 s its 4 waits spaced them (how much longer is the machine's to say).
    crawl = materialization(result, "crawl_results")
    assert crawl["rate_limited_by"].startswith(limited.removeprefix("rate limited by "))
    seconds = float(summary.split(" failed in ")[1].split(" s of crawling")[0])
    assert seconds >= 1.6
    assert crawl["pages_per_second"] == pytest.approx(5 / seconds, rel=0.04, abs=0.01)


def test_a_crawl_nothing_held_back_says_so(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2))
    result = embedded.run(pipeline_id, workspace_id)
    [summary] = [line for line in run_log(embedded.instance, result.run_id) if "crawl finished" in line]
    assert summary.endswith("; no limit held requests back")
    assert "rate_limited_by" not in materialization(result, "crawl_results")


def test_the_crawl_carries_dagsters_row_count_and_a_table_of_failed_urls(embedded: Stack):
    urls = [*embedded.site(3), embedded.web.url("/missing")]
    workspace_id, pipeline_id = embedded.pipeline(urls)
    result = embedded.run(pipeline_id, workspace_id)
    crawl = materialization(result, "crawl_results")

    assert crawl["dagster/row_count"] == crawl["urls_attempted"] == 4
    table = crawl["failed_urls"]
    assert [column.name for column in table.schema.columns] == ["url", "reason"]
    assert [(row.data["url"], row.data["reason"]) for row in table.records] == [(urls[-1], "HTTP 404")]
    # Listed once: no second copy of the failed URLs in the metadata.
    assert [key for key in crawl if "failed_url" in key] == ["failed_urls"]
