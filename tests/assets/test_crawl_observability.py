"""What a crawl tells its run while it works and after: progress lines in the run log, Dagster's own metadata."""

from __future__ import annotations

import re

import dagster as dg
import pytest

from pipelines_dagster.core.run import engine as run_engine
from tests.assets.conftest import Stack, materialization
from tests.support.web import page

PROGRESS = re.compile(r"pipeline (\d+): crawled (\d+) of (\d+) pages, (\d+) failed, [\d.]+ pages/s")


def run_log(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The run's log messages (not its structured events), in order."""
    return [entry.user_message for entry in instance.all_logs(run_id) if entry.dagster_event is None]


def test_a_slow_crawl_logs_its_progress_to_the_run_log(embedded: Stack, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(run_engine, "PROGRESS_EVERY_SECONDS", 0.2)
    # Four pages at a time per host, each answering after 0.25 s: about 1.5 s of crawling in all.
    for n in range(20):
        embedded.web.route(f"/slow{n}", page(f"Slow {n}", f"Paragraph {n}.", delay=0.25))
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


def test_a_quick_crawl_logs_no_progress(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(3))
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success
    assert not any(PROGRESS.search(line) for line in run_log(embedded.instance, result.run_id))


def test_the_crawl_carries_dagsters_row_count_and_a_table_of_failed_urls(embedded: Stack):
    urls = [*embedded.site(3), embedded.web.url("/missing")]
    workspace_id, pipeline_id = embedded.pipeline(urls)
    result = embedded.run(pipeline_id, workspace_id)
    crawl = materialization(result, "crawl_results")

    assert crawl["dagster/row_count"] == crawl["urls_attempted"] == 4
    table = crawl["failed_urls_table"]
    assert [column.name for column in table.schema.columns] == ["url", "reason"]
    assert [(row.data["url"], row.data["reason"]) for row in table.records] == [(urls[-1], "HTTP 404")]
    # The markdown table stays, for what reads it.
    assert "/missing" in crawl["failed_urls"]
