"""A crawl stopped part way keeps what it fetched in its checkpoint, and the run that continues it
fetches only the rest: the stored crawl and its charge are what one uninterrupted crawl makes."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from pipelines_dagster.core.crawl.record import CrawlRecord, read_crawl
from pipelines_dagster.core.run.checkpoint import Checkpoint, checkpoint_prefix
from pipelines_dagster.core.run.engine import execute_crawl
from pipelines_dagster.core.run.plan import plan_run
from pipelines_dagster.core.run.report import CrawlProgress, CrawlReport
from tests.assets.conftest import Stack
from tests.assets.test_site_crawl import build_site, elsewhere, site_config  # noqa: F401 (a fixture)


class Stopped(Exception):
    """The run was stopped (as past its maximum runtime) after some pages."""


def crawl(stack: Stack, pipeline_id: int, run_id: str, *, root: str, stop_after: int | None = None) -> CrawlReport:
    with Session(stack.engine) as session:
        plan = plan_run(session, pipeline_id, keyring=None)
    prefix = checkpoint_prefix(workspace_id=plan.workspace_id, pipeline_id=pipeline_id, root_run_id=root)

    def progress(done: CrawlProgress) -> None:
        if stop_after is not None and done.done >= stop_after:
            raise Stopped

    resources = stack.resources()
    return execute_crawl(
        plan,
        run_id=run_id,
        charge_key=f"crawl:{root}:{pipeline_id}",
        locks=resources["locks"].locks,
        billing=resources["billing"].billing,
        blob_store=stack.blob,
        crawler=resources["crawler"].crawler,
        previous_blob_key=None,
        progress=progress,
        progress_every_seconds=0,
        checkpoint=Checkpoint(stack.blob, prefix, run_id, every_seconds=3600, every_records=2),
    )


def stored(stack: Stack, pipeline_id: int, root: str) -> set[str]:
    with Session(stack.engine) as session:
        plan = plan_run(session, pipeline_id, keyring=None)
    prefix = checkpoint_prefix(workspace_id=plan.workspace_id, pipeline_id=pipeline_id, root_run_id=root)
    return {record.url for record in Checkpoint(stack.blob, prefix, "reader").records()}


def as_stored(records: list[CrawlRecord], base: str) -> dict[str, tuple]:
    """Each URL's record as the KB and the timeline read it, without when or how long it took."""
    return {
        record.url.removeprefix(base): (record.status, record.content, record.content_hash, tuple(record.links))
        for record in records
    }


def path(stack: Stack, url: str) -> str:
    return url.removeprefix(stack.web.base_url)


def test_a_list_crawl_stopped_part_way_is_continued_from_its_checkpoint(stack: Stack):
    stack.billing_enabled = True
    urls = stack.site(12)
    workspace_id, pipeline_id = stack.pipeline(urls, credit=100_000)
    with pytest.raises(Stopped):
        crawl(stack, pipeline_id, "run-a", root="run-a", stop_after=5)
    kept = stored(stack, pipeline_id, "run-a")
    assert len(kept) >= 5
    assert stack.charges(workspace_id) == (0, 0)  # nothing charged for a stopped crawl

    report = crawl(stack, pipeline_id, "run-b", root="run-a")
    assert report.resumed == len(kept) and report.attempted == report.succeeded == 12
    # The stored pages were not fetched again; the ones in flight when it stopped were.
    assert all(stack.web.hits(path(stack, url)) == 1 for url in kept)
    assert all(1 <= stack.web.hits(path(stack, url)) <= 2 for url in urls)
    # Charged once for the whole crawl, under the root run's key; the checkpoint is gone.
    assert stack.charges(workspace_id) == (1, 1) and report.charged_micros == 12 * 1000
    assert stored(stack, pipeline_id, "run-a") == set()

    _, whole_pipeline = stack.pipeline(urls, credit=100_000)
    whole = crawl(stack, whole_pipeline, "run-whole", root="run-whole")
    base = stack.web.base_url
    assert as_stored(list(read_crawl(stack.blob, report.blob_key)), base) == as_stored(
        list(read_crawl(stack.blob, whole.blob_key)), base
    )


def test_a_site_crawl_continued_from_its_checkpoint_discovers_what_one_crawl_would(embedded: Stack, elsewhere):
    start = build_site(embedded.web, elsewhere)
    _, pipeline_id = embedded.pipeline([], site=site_config(start))
    with pytest.raises(Stopped):
        crawl(embedded, pipeline_id, "site-a", root="site-a", stop_after=2)
    kept = stored(embedded, pipeline_id, "site-a")
    assert kept
    hits = {url: embedded.web.hits(path(embedded, url)) for url in kept}
    report = crawl(embedded, pipeline_id, "site-b", root="site-a")
    assert report.resumed == len(kept)
    # Discovery went on from the stored pages' links without fetching them.
    assert {url: embedded.web.hits(path(embedded, url)) for url in kept} == hits

    _, whole_pipeline = embedded.pipeline([], site=site_config(start))
    whole = crawl(embedded, whole_pipeline, "site-whole", root="site-whole")
    base = embedded.web.base_url
    resumed = as_stored(list(read_crawl(embedded.blob, report.blob_key)), base)
    assert resumed == as_stored(list(read_crawl(embedded.blob, whole.blob_key)), base)
    assert set(resumed) == {"/", "/docs/a", "/docs/b", "/guide", "/guide/deep", "/guide/new", "/leaves"}
    assert (report.pages_discovered, report.pages_duplicate) == (whole.pages_discovered, whole.pages_duplicate)
