"""A connector's user agent and robots override through whole runs: each run records the user agent it sent and
whether it obeyed robots.txt, in its metadata and its log's start line; a site whose robots.txt shuts crawlers
out is crawled only by the connector of the workspace that owns it, which never asks for that robots.txt."""

from __future__ import annotations

import pytest

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog.connectors import ConnectorChanges
from pipelines_dagster.core.catalog.workspaces import set_owned_hosts
from pipelines_dagster.core.crawl.types import CrawlerConfig
from pipelines_dagster.crawl_metadata import CrawlMetadata
from tests.assets.conftest import Stack, materialization
from tests.assets.test_crawl_observability import run_log
from tests.support.web import Reply

AGENT = "acme-kb/1.0 (+https://acme.example/bot)"


def start_line(stack: Stack, run_id: str) -> str:
    [line] = [line for line in run_log(stack.instance, run_id) if "crawl started" in line]
    return line


@pytest.fixture
def shut(embedded: Stack) -> Stack:
    """The stack's site, whose robots.txt disallows every crawler."""
    embedded.web.route("/robots.txt", Reply(body="User-agent: *\nDisallow: /\n", content_type="text/plain"))
    return embedded


def test_each_run_records_its_user_agent_and_robots_and_only_an_owner_crawls_past_robots_txt(shut: Stack):
    stack = shut
    urls = stack.site(3)
    workspace_id, pipeline_id = stack.pipeline(urls)

    obeyed = stack.run(pipeline_id, workspace_id)
    assert not obeyed.success
    crawl = CrawlMetadata.read(materialization(obeyed, "crawl_results"))
    assert (crawl.urls_failed, crawl.user_agent, crawl.robots, crawl.robots_ignored_on) == (
        3,
        CrawlerConfig.user_agent,
        "obey",
        None,
    )
    assert start_line(stack, obeyed.run_id).endswith(f"; as {CrawlerConfig.user_agent!r}, obeying robots.txt")
    asked = stack.web.hits("/robots.txt")
    assert asked == 1

    with transaction(stack.sessions) as session:
        set_owned_hosts(session, workspace_id, ["127.0.0.1"])
    stack.change_connector(pipeline_id, ConnectorChanges(robots="ignore", user_agent=AGENT))
    waived = stack.run(pipeline_id, workspace_id)
    assert waived.success
    crawl = CrawlMetadata.read(materialization(waived, "crawl_results"))
    assert (crawl.urls_succeeded, crawl.user_agent, crawl.robots, crawl.robots_ignored_on) == (
        3,
        AGENT,
        "ignore",
        "127.0.0.1",
    )
    assert start_line(stack, waived.run_id).endswith(
        f"; as {AGENT!r}, ignoring robots.txt on 127.0.0.1 (hosts the workspace owns)"
    )
    assert stack.web.hits("/robots.txt") == asked
    pages = [request for request in stack.web.requests if request.path.startswith("/p")]
    assert {request.headers["user-agent"] for request in pages} == {AGENT}
    assert len(stack.documents(workspace_id)) == 3
