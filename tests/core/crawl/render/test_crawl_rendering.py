"""Crawls that render: which pages each render setting renders, what their outcomes say, and a browser lost
mid-crawl failing only the pages it held."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from dataclasses import replace

import psutil
import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.render.rule import RenderMode
from pipelines_dagster.core.crawl.types import CrawlerConfig, CrawlOutcome, PreviousFetch
from tests.core.crawl.render.conftest import CONFIG
from tests.support.web import Reply, WebServer, html_document

pytestmark = pytest.mark.usefixtures("loopback_only")

SCRIPTED_TEXT = "Rendered release notes: the scheduler now retries failed partitions twice before alerting."
FETCHED_TEXT = "Fetched reference: every API token is scoped to one workspace and expires after ninety days."
STATIC_TEXT = " ".join(f"Static paragraph {n} of the installation guide, served as plain HTML." for n in range(12))


def app(script: str) -> Reply:
    """A page whose body is an empty mount element filled by `script`: thin HTML, an app shell."""
    return Reply(
        body=f"<!DOCTYPE html><html><head><title>App</title></head><body><div id='root'></div>"
        f"<script>{script}</script></body></html>"
    )


def serve_site(web: WebServer) -> dict[str, str]:
    """A page written by script, one that fetches its text as JSON from the same site, and a static page."""
    web.route("/scripted", app(f"document.getElementById('root').innerHTML = '<p>{SCRIPTED_TEXT}</p>';"))
    web.route("/data/reference.json", Reply(body=f'{{"text": "{FETCHED_TEXT}"}}', content_type="application/json"))
    web.route(
        "/fetched",
        app(
            "fetch('/data/reference.json').then(r => r.json())"
            ".then(d => { document.getElementById('root').innerHTML = '<p>' + d.text + '</p>'; });"
        ),
    )
    web.route("/static", Reply(body=html_document("Install", STATIC_TEXT)))
    return {name: web.url(f"/{name}") for name in ("scripted", "fetched", "static")}


def crawl(
    config: CrawlerConfig,
    urls: list[str],
    render: RenderMode,
    previous: Mapping[str, PreviousFetch] | None = None,
) -> dict[str, CrawlOutcome]:
    with Crawler(config) as crawler:

        async def run() -> list[CrawlOutcome]:
            return [outcome async for outcome in crawler.crawl(urls, previous=previous, render=render)]

        return {outcome.url: outcome for outcome in asyncio.run(run())}


@pytest.fixture
def config(chromium: str) -> CrawlerConfig:
    return replace(CONFIG, chromium=chromium, render_timeout=15.0)


@pytest.mark.parametrize("render", [RenderMode.AUTO, RenderMode.ALWAYS])
def test_script_written_and_json_fetched_text_is_found_when_rendering(
    web: WebServer, config: CrawlerConfig, render: RenderMode
) -> None:
    urls = serve_site(web)
    outcomes = crawl(config, list(urls.values()), render)
    for name, text in (("scripted", SCRIPTED_TEXT), ("fetched", FETCHED_TEXT)):
        outcome = outcomes[urls[name]]
        assert outcome.status == "success" and text in outcome.content
        assert outcome.rendered and outcome.render_seconds > 0
    static = outcomes[urls["static"]]
    assert static.status == "success" and "Static paragraph 11" in static.content
    # The document is fetched once by the crawler, never by the browser, whatever renders it.
    assert (web.hits("/scripted"), web.hits("/fetched"), web.hits("/static")) == (1, 1, 1)
    assert web.hits("/data/reference.json") == 1
    assert static.rendered is (render is RenderMode.ALWAYS)


def test_under_never_script_built_pages_stay_thin_and_nothing_is_rendered(
    web: WebServer, config: CrawlerConfig
) -> None:
    urls = serve_site(web)
    outcomes = crawl(config, list(urls.values()), RenderMode.NEVER)
    assert not any(outcome.rendered for outcome in outcomes.values())
    assert SCRIPTED_TEXT not in outcomes[urls["scripted"]].content
    assert FETCHED_TEXT not in outcomes[urls["fetched"]].content
    assert web.hits("/data/reference.json") == 0


def test_an_unchanged_page_is_not_rendered_again(web: WebServer, config: CrawlerConfig) -> None:
    urls = serve_site(web)
    first = crawl(config, list(urls.values()), RenderMode.AUTO)
    previous = {
        url: PreviousFetch(raw_hash=outcome.raw_hash, content_hash=outcome.content_hash)
        for url, outcome in first.items()
    }
    again = crawl(config, list(urls.values()), RenderMode.AUTO, previous=previous)
    assert all(outcome.unchanged and not outcome.rendered for outcome in again.values())
    assert web.hits("/data/reference.json") == 1  # only the first crawl's rendering asked for it


def test_without_a_browser_the_pages_that_need_one_fail_saying_so_and_the_rest_succeed(
    web: WebServer, config: CrawlerConfig
) -> None:
    urls = serve_site(web)
    outcomes = crawl(replace(config, chromium="/nonexistent/chromium"), list(urls.values()), RenderMode.AUTO)
    for name in ("scripted", "fetched"):
        assert outcomes[urls[name]].status == "failed"
        assert outcomes[urls[name]].error == (
            "the page needs rendering and the browser is not available: no Chromium at /nonexistent/chromium: "
            "install the system package (apt-get install chromium) or pass the browser's path"
        )
    assert outcomes[urls["static"]].status == "success"


def _kill_this_crawls_browser() -> None:
    """SIGKILL the browser this process launched (its root carries the renderer's marker switch)."""
    for process in psutil.Process().children(recursive=True):
        try:
            if any(part.startswith("--pipelines-render=") for part in process.cmdline()) and not any(
                part.startswith("--type=") for part in process.cmdline()
            ):
                os.kill(process.pid, signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue


def test_a_browser_killed_mid_crawl_fails_only_its_pages_and_the_later_pages_render(
    web: WebServer, config: CrawlerConfig
) -> None:
    killed: list[bool] = []

    def slow(_request: object) -> Reply:
        if not killed:
            killed.append(True)
            _kill_this_crawls_browser()
        return Reply(body='{"text": "never shown"}', content_type="application/json")

    web.handle("/slow.json", slow)
    web.route("/held", app("fetch('/slow.json').then(r => r.json()).then(d => { root.textContent = d.text; });"))
    for n in range(4):
        web.route(f"/later{n}", app(f"document.getElementById('root').textContent = 'Later page {n} rendered';"))
    # One page at a time: the held page is the only one the browser has when it dies, and the later ones
    # wait for it, so they meet the relaunched browser.
    outcomes = crawl(
        replace(config, render_pages=1, global_concurrency=1),
        [web.url("/held"), *(web.url(f"/later{n}") for n in range(4))],
        RenderMode.ALWAYS,
    )
    held = outcomes[web.url("/held")]
    assert held.status == "failed" and held.error == (
        "rendering failed: the browser crashed or was killed while rendering the page; "
        "it is restarted for the next page"
    )
    for n in range(4):
        later = outcomes[web.url(f"/later{n}")]
        assert later.status == "success" and f"Later page {n} rendered" in later.content
