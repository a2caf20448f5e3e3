"""A rendered page's requests follow the credentials' rule: a script fetching its own host's JSON sends them, one
fetching a third-party host's sends none; and the browser itself never holds them (its requests go through the
crawl's client, which adds them per request)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.credentials import CredentialHosts, Credentials, HostCredentials
from pipelines_dagster.core.crawl.render.rule import RenderMode
from pipelines_dagster.core.crawl.types import CrawlOutcome, ListSource
from tests.core.crawl.render.conftest import CONFIG
from tests.core.crawl.render.test_crawl_rendering import app
from tests.support.web import Reply, StaticResolver, WebServer

pytestmark = pytest.mark.usefixtures("loopback_only")

TOKEN = "tok-render-3e1b77"
OWN_TEXT = "Own data: the staging docs list every internal endpoint with its owner and its escalation path."


@pytest.fixture
def third_party() -> Iterator[WebServer]:
    with WebServer() as server:
        yield server


def test_a_pages_script_gets_them_for_its_own_host_and_not_for_a_third_party(
    web: WebServer, third_party: WebServer, chromium: str
) -> None:
    resolver = StaticResolver({"docs.test": ["127.0.0.1"], "cdn.test": ["127.0.0.1"]})
    elsewhere = third_party.url("/data/widget.json", host="cdn.test")
    web.route(
        "/page",
        app(
            f"fetch('{elsewhere}').catch(() => null);"
            "fetch('/data/own.json').then(r => r.json())"
            ".then(d => { document.getElementById('root').innerHTML = '<p>' + d.text + '</p>'; });"
        ),
    )

    def own_json(request):  # only for the bearer of the token, as a staging site answers
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return Reply(status=401, body="{}", content_type="application/json")
        return Reply(body=f'{{"text": "{OWN_TEXT}"}}', content_type="application/json")

    web.handle("/data/own.json", own_json)
    third_party.route("/data/widget.json", Reply(body='{"ad": 1}', content_type="application/json"))
    url = web.url("/page", host="docs.test")
    credentials = HostCredentials(Credentials(bearer=TOKEN), CredentialHosts([url]))

    with Crawler(replace(CONFIG, chromium=chromium, render_timeout=15.0), resolver=resolver) as crawler:

        async def run() -> list[CrawlOutcome]:
            source = ListSource([url])
            return [o async for o in crawler.crawl_source(source, render=RenderMode.ALWAYS, credentials=credentials)]

        [outcome] = asyncio.run(run())

    assert outcome.status == "success" and outcome.rendered and OWN_TEXT in outcome.content
    own = {request.path: request.headers.get("authorization") for request in web.requests}
    assert own["/page"] == own["/data/own.json"] == f"Bearer {TOKEN}"
    [widget] = third_party.requests
    assert widget.path == "/data/widget.json" and "authorization" not in widget.headers
    assert not any(TOKEN in value for value in widget.headers.values())
