"""A connector's render setting through a whole run: script-built pages reach the KB with their text when they
are rendered, the crawl records and metadata say what was rendered, and an unchanged page is not rendered again."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines_dagster.core.crawl.health import THRESHOLD_KEY
from pipelines_dagster.core.crawl.record import read_crawl
from pipelines_dagster.crawl_metadata import CrawlMetadata
from tests.assets.conftest import Stack, materialization, set_pipeline
from tests.assets.test_crawl_observability import run_log
from tests.conftest import missing
from tests.core.crawl.render.conftest import CHROMIUM
from tests.core.crawl.render.test_crawl_rendering import FETCHED_TEXT, SCRIPTED_TEXT, serve_site


@pytest.fixture(autouse=True)
def chromium() -> None:
    if not Path(CHROMIUM).exists():
        missing(f"no Chromium at {CHROMIUM}: install it (apt-get install chromium) to run the render tests")


@pytest.mark.parametrize("setting", ["never", "auto", "always"])
def test_script_built_pages_reach_the_kb_with_their_text_when_rendered(embedded: Stack, setting: str) -> None:
    urls = serve_site(embedded.web)
    workspace_id, pipeline_id = embedded.pipeline(list(urls.values()), render=setting)
    # Unrendered, the two script-built pages extract no text: empty, which is under the default threshold.
    set_pipeline(embedded, pipeline_id, config={THRESHOLD_KEY: 0.3})
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success

    content = {document.url: document.content or "" for document in embedded.documents(workspace_id)}
    rendering = setting != "never"
    assert (SCRIPTED_TEXT in content.get(urls["scripted"], "")) is rendering
    assert (FETCHED_TEXT in content.get(urls["fetched"], "")) is rendering
    assert "Static paragraph 11" in content[urls["static"]]

    metadata = CrawlMetadata.read(materialization(result, "crawl_results"))
    records = {record.url: record for record in read_crawl(embedded.blob, metadata.blob_key or "")}
    rendered = {url for url, record in records.items() if record.rendered}
    expected = {"never": set(), "auto": {urls["scripted"], urls["fetched"]}, "always": set(urls.values())}[setting]
    assert rendered == expected
    thin = {url for url, record in records.items() if record.status == "empty"}
    assert thin == ({urls["scripted"], urls["fetched"]} if setting == "never" else set())
    assert all(records[url].render_seconds > 0 for url in rendered)
    assert metadata.render == setting
    assert metadata.pages_rendered == (None if setting == "never" else len(expected))
    assert (metadata.render_seconds is None) is (setting == "never")
    assert embedded.web.hits("/static") == 1  # fetched once, whatever the setting
    said = {
        "never": "16 in all at a time",
        "auto": "16 in all at a time; pages that need it rendered in a browser (render: auto)",
        "always": "16 in all at a time; every page rendered in a browser (render: always)",
    }[setting]
    assert any(f"{said}; as " in line and "crawl started" in line for line in run_log(embedded.instance, result.run_id))
    [summary] = [line for line in run_log(embedded.instance, result.run_id) if "crawl finished" in line]
    assert (f"; {len(expected)} pages rendered in a browser (" in summary) is rendering


def test_a_recrawl_of_unchanged_pages_renders_nothing(embedded: Stack) -> None:
    urls = serve_site(embedded.web)
    workspace_id, pipeline_id = embedded.pipeline(list(urls.values()), render="auto")
    assert embedded.run(pipeline_id, workspace_id).success
    again = embedded.run(pipeline_id, workspace_id)
    assert again.success
    metadata = CrawlMetadata.read(materialization(again, "crawl_results"))
    assert (metadata.urls_unchanged, metadata.pages_rendered, metadata.render_seconds) == (3, 0, 0.0)
    assert embedded.web.hits("/data/reference.json") == 1
    # The KB keeps the rendered text the first crawl found.
    content = {document.url: document.content or "" for document in embedded.documents(workspace_id)}
    assert SCRIPTED_TEXT in content[urls["scripted"]] and FETCHED_TEXT in content[urls["fetched"]]
