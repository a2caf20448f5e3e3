"""The guarded headless browser on the system Chromium: pages written by script come back rendered; what a
page's scripts ask of a private address reaches nothing; a page that loops, allocates without end or loses
its browser fails alone, and the next page renders."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

from pipelines_dagster.core.crawl.render.browser import NETWORK_SHUT, Rendered, Renderer, RenderError
from tests.core.crawl.render.conftest import guarded_fetcher
from tests.support.web import Reply, StaticResolver, WebServer, redirect

pytestmark = pytest.mark.usefixtures("loopback_only")
BUDGET = 10.0


def page_with(script: str, *, body: str = "<div id='app'></div>") -> str:
    return f"<!DOCTYPE html><html><head><title>App</title></head><body>{body}<script>{script}</script></body></html>"


Work = Callable[[Renderer, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Shared:
    """One Renderer with the default options for the module's tests, on an event loop kept between them: each page
    gets a fresh context of the same browser, as the pages of one crawl do, and Chromium starts once, not per test."""

    loop: asyncio.AbstractEventLoop
    renderer: Renderer


@pytest.fixture(scope="module")
def shared(chromium: str) -> Iterator[Shared]:
    loop = asyncio.new_event_loop()
    renderer = Renderer(executable=chromium)
    loop.run_until_complete(renderer.start())
    try:
        yield Shared(loop, renderer)
    finally:
        loop.run_until_complete(renderer.close())
        loop.close()


async def _with_fetcher(renderer: Renderer, work: Work, resolver: StaticResolver | None) -> Any:
    async with guarded_fetcher(resolver=resolver) as fetcher:
        return await work(renderer, fetcher.fetch_resource)


def with_renderer(chromium: str, work: Work, **options: Any) -> Any:
    """`work(renderer, fetch_resource)` run on a Renderer of its own (for `options`, or a browser the test kills)
    and a real guarded Fetcher."""

    async def run() -> Any:
        async with Renderer(executable=chromium, **options) as renderer:
            return await _with_fetcher(renderer, work, None)

    return asyncio.run(run())


def with_shared(shared: Shared, work: Work, *, resolver: StaticResolver | None = None) -> Any:
    """`work(renderer, fetch_resource)` run on the module's Renderer and a real guarded Fetcher of its own."""
    return shared.loop.run_until_complete(_with_fetcher(shared.renderer, work, resolver))


def render_one(shared: Shared, url: str, html: str, *, resolver: StaticResolver | None = None) -> Rendered:
    async def work(renderer: Renderer, fetch_resource: Any) -> Rendered:
        return await renderer.render(url, html, fetch_resource=fetch_resource, budget_seconds=BUDGET)

    return with_shared(shared, work, resolver=resolver)


def test_text_written_by_a_script_and_text_fetched_as_json_are_rendered(web: WebServer, shared: Shared) -> None:
    web.route(
        "/app.js",
        Reply(body="document.getElementById('app').textContent = 'Written by script';", content_type="text/javascript"),
    )
    web.route("/data.json", Reply(body='{"text": "Fetched as JSON"}', content_type="application/json", delay=0.6))
    scripted = "<div id='app'></div><script src='/app.js'></script>"
    # The JSON answers after the page's load event, and after more than the quiet the render waits for:
    # settling counts a request that is out, not only the time since the last one.
    fetched = page_with("fetch('/data.json').then(r => r.json()).then(d => { app.textContent = d.text; });")

    async def work(renderer: Renderer, fetch_resource: Any) -> list[Rendered]:
        return list(
            await asyncio.gather(
                *(
                    renderer.render(web.url(path), html, fetch_resource=fetch_resource, budget_seconds=BUDGET)
                    for path, html in (("/scripted", scripted), ("/fetched", fetched))
                )
            )
        )

    scripted_page, fetched_page = with_shared(shared, work)
    assert "Written by script" in scripted_page.html
    assert "Fetched as JSON" in fetched_page.html
    assert (scripted_page.fulfilled, fetched_page.fulfilled) == (2, 2)  # the document and its one resource
    # The documents came from the crawler's body: a page is fetched once.
    assert (web.hits("/scripted"), web.hits("/fetched"), web.hits("/app.js"), web.hits("/data.json")) == (0, 0, 1, 1)


REFUSED = "document.body.dataset.outcome = 'refused'"
REACHED = "document.body.dataset.outcome = 'reached'"
PRIVATE_REQUESTS = {
    "literal": "fetch('{private}/secret').then(() => {{ {reached} }}, () => {{ {refused} }});",
    "name": "fetch('{named}/secret').then(() => {{ {reached} }}, () => {{ {refused} }});",
    "redirect": "fetch('/hop').then(() => {{ {reached} }}, () => {{ {refused} }});",
    "img": "const i = new Image(); i.onload = () => {{ {reached} }}; i.onerror = () => {{ {refused} }}; "
    "i.src = '{private}/secret.png'; document.body.append(i);",
    "xhr": "const x = new XMLHttpRequest(); x.onload = () => {{ {reached} }}; x.onerror = () => {{ {refused} }}; "
    "x.open('GET', '{private}/secret'); x.send();",
    "websocket": "const s = new WebSocket('{socket}/secret'); s.onopen = () => {{ {reached} }}; "
    "s.onclose = () => {{ {refused} }};",
}


@pytest.mark.parametrize("way", sorted(PRIVATE_REQUESTS))
def test_a_script_reaches_no_private_address(web: WebServer, private: WebServer, shared: Shared, way: str) -> None:
    web.route("/hop", redirect(private.url("/secret")))
    private.route("/secret", Reply(body="secret", content_type="text/plain"))
    script = PRIVATE_REQUESTS[way].format(
        private=private.base_url,
        named=private.url("", host="intranet.test"),
        socket=private.base_url.replace("http", "ws", 1),
        reached=REACHED,
        refused=REFUSED,
    )
    resolver = StaticResolver({"intranet.test": ["127.0.0.2"]})
    rendered = render_one(shared, web.url("/page"), page_with(script), resolver=resolver)
    assert 'data-outcome="refused"' in rendered.html
    assert rendered.refused == 1
    assert private.requests == []
    assert web.hits("/hop") == (1 if way == "redirect" else 0)
    assert resolver.lookups == (["intranet.test"] if way == "name" else [])


LOOPS = page_with("while (true) {}")
ALLOCATES = page_with("const kept = []; while (true) { kept.push(new Array(1e6).fill(Math.random())); }")
# Typed arrays live outside the JavaScript heap, so only the watchdog on the browser's memory stops this one.
ALLOCATES_OUTSIDE_THE_HEAP = page_with(
    "const kept = []; while (true) { kept.push(new Uint8Array(64 * 1024 * 1024).fill(1)); }"
)


# Only the looping page ends at its budget; the others end at their caps, given a budget far past the time that
# takes, so that on a loaded machine the budget does not end them first and read as a cap that did not hold.
@pytest.mark.parametrize(
    ("html", "budget", "reason"),
    [
        (LOOPS, 3.0, "did not render within its budget of 3 s"),
        (ALLOCATES, 30.0, "crashed (a page that allocates past the 128 MiB JavaScript heap cap ends so)"),
        (ALLOCATES_OUTSIDE_THE_HEAP, 30.0, "past its cap of 600 MiB, and was restarted"),
    ],
    ids=["loops", "allocates", "allocates-outside-the-heap"],
)
def test_a_runaway_page_fails_alone_and_the_next_page_renders(
    web: WebServer, chromium: str, html: str, budget: float, reason: str
) -> None:
    normal = page_with("app.textContent = 'Still rendering';")

    async def work(renderer: Renderer, fetch_resource: Any) -> tuple[Any, ...]:
        async def render(path: str, document: str, budget: float) -> Rendered | RenderError:
            try:
                return await renderer.render(
                    web.url(path), document, fetch_resource=fetch_resource, budget_seconds=budget
                )
            except RenderError as exc:
                return exc

        # The normal page starts once the runaway one is under way, and renders beside it.
        runaway = asyncio.create_task(render("/runaway", html, budget))
        await asyncio.sleep(0.5)
        beside = await render("/beside", normal, BUDGET)
        failed = await runaway
        after = await render("/after", normal, BUDGET)
        return failed, beside, after

    failed, beside, after = with_renderer(chromium, work, heap_mib=128, memory_cap_mib=600, watch_seconds=0.1)
    assert isinstance(failed, RenderError) and reason in str(failed)
    assert isinstance(after, Rendered) and "Still rendering" in after.html
    if "restarted" not in reason:  # a restarted browser fails every page it holds, by design
        assert isinstance(beside, Rendered) and "Still rendering" in beside.html


def pages_around_a_kill(web: WebServer) -> tuple[str, str]:
    """A page waiting 2 s for its JSON while its browser is killed, and a page rendered after."""
    web.route("/slow.json", Reply(body='{"text": "late"}', content_type="application/json", delay=2.0))
    waiting = page_with("fetch('/slow.json').then(r => r.json()).then(d => { app.textContent = d.text; });")
    return waiting, page_with("app.textContent = 'Rendered after the kill';")


def test_a_killed_browser_fails_only_the_pages_in_flight_and_the_next_page_renders(
    web: WebServer, chromium: str
) -> None:
    waiting, normal = pages_around_a_kill(web)

    async def work(renderer: Renderer, fetch_resource: Any) -> tuple[Any, ...]:
        in_flight = [
            asyncio.create_task(
                renderer.render(web.url(f"/{n}"), waiting, fetch_resource=fetch_resource, budget_seconds=BUDGET)
            )
            for n in range(2)
        ]
        await asyncio.sleep(1.0)
        killed = renderer.browser_pid
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        failures = await asyncio.gather(*in_flight, return_exceptions=True)
        after = await renderer.render(web.url("/after"), normal, fetch_resource=fetch_resource, budget_seconds=BUDGET)
        return failures, after, killed, renderer.browser_pid

    failures, after, killed, relaunched = with_renderer(chromium, work)
    assert [str(failure) for failure in failures] == [
        "the browser crashed or was killed while rendering the page; it is restarted for the next page"
    ] * 2
    assert "Rendered after the kill" in after.html
    assert relaunched not in (None, killed)


def test_a_browser_gone_while_playwright_cannot_tell_fails_its_pages_from_the_watchdog(
    web: WebServer, chromium: str
) -> None:
    """The Playwright driver frozen, it cannot report the browser's death: the watchdog finds the process ended."""
    waiting, normal = pages_around_a_kill(web)

    async def work(renderer: Renderer, fetch_resource: Any) -> tuple[Any, ...]:
        in_flight = asyncio.create_task(
            renderer.render(web.url("/held"), waiting, fetch_resource=fetch_resource, budget_seconds=60)
        )
        await asyncio.sleep(1.0)
        killed = renderer.browser_pid
        assert killed is not None
        driver = psutil.Process(killed).parent()  # Playwright's driver launched it
        assert driver is not None and "playwright" in " ".join(driver.cmdline())
        driver.suspend()
        os.kill(killed, signal.SIGKILL)
        try:
            failure = await asyncio.wait_for(asyncio.gather(in_flight, return_exceptions=True), 30)
        finally:
            driver.resume()
        after = await renderer.render(web.url("/after"), normal, fetch_resource=fetch_resource, budget_seconds=BUDGET)
        return failure[0], after

    failure, after = with_renderer(chromium, work, watch_seconds=0.1)
    assert (
        str(failure) == "the browser crashed or was killed while rendering the page; it is restarted for the next page"
    )
    assert "Rendered after the kill" in after.html


def test_a_missing_browser_says_what_to_install() -> None:
    async def start() -> None:
        await Renderer(executable="/nonexistent/chromium").start()

    with pytest.raises(RenderError, match=r"no Chromium at /nonexistent/chromium: install the system package"):
        asyncio.run(start())


# Each wall of Chromium's shut network alone, taken from the switches the Renderer launches with.
WALLS = {
    "resolver": [switch for switch in NETWORK_SHUT if switch.startswith("--host-resolver-rules=")],
    # The proxy's own name is kept from the real DNS, narrowly: the test makes no lookup off this machine.
    "proxy": [
        "--host-resolver-rules=MAP proxy.invalid ~NOTFOUND",
        *(switch for switch in NETWORK_SHUT if switch.startswith("--proxy-")),
    ],
    "none": [],
}


@pytest.mark.parametrize(
    ("wall", "host", "outcome"),
    [
        ("resolver", "127.0.0.2", "net::ERR_NAME_NOT_RESOLVED"),
        ("resolver", "intranet.test", "net::ERR_NAME_NOT_RESOLVED"),
        ("proxy", "127.0.0.2", "net::ERR_PROXY_CONNECTION_FAILED"),
        # The control: with neither wall, Chromium goes straight to the private address.
        ("none", "127.0.0.2", "loaded"),
    ],
)
def test_each_wall_of_chromiums_shut_network_alone_keeps_an_unrouted_request_in(
    private: WebServer, chromium: str, wall: str, host: str, outcome: str
) -> None:
    """Behind routing, a request that escaped it (none should) would still go nowhere: no name (nor an
    address literal) resolves, and whatever got past that would go to a proxy that does not exist."""
    from playwright.async_api import Error, async_playwright

    async def unrouted() -> str:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium, args=WALLS[wall])
            page = await browser.new_page()
            try:
                await page.goto(private.url("/secret", host=host), timeout=5_000)
            except Error as exc:
                return str(exc).splitlines()[0]
            finally:
                await browser.close()
        return "loaded"

    private.route("/secret", Reply(body="secret", content_type="text/plain"))
    assert outcome in asyncio.run(unrouted())
    if wall == "none":
        assert private.hits("/secret") == 1
    else:
        assert private.requests == []


REFUSED_KINDS = {
    "media": "const v = document.createElement('video'); v.onerror = () => {{ {refused} }}; "
    "v.src = '/clip.webm'; document.body.append(v);",
    "eventsource": "const e = new EventSource('/events'); e.onerror = () => {{ {refused} }};",
    "post": "fetch('/form', {{method: 'POST', body: 'x'}}).then(() => {{ {reached} }}, () => {{ {refused} }});",
    "navigation": "fetch('/wait').finally(() => {{ location.href = '/elsewhere'; }});",
}


@pytest.mark.parametrize("kind", sorted(REFUSED_KINDS))
def test_media_event_streams_writes_and_navigating_away_are_refused_even_on_the_allowed_site(
    web: WebServer, shared: Shared, kind: str
) -> None:
    for path in ("/clip.webm", "/events", "/form", "/elsewhere"):
        web.route(path, Reply(body="served", content_type="text/plain"))
    web.route("/wait", Reply(body="", content_type="text/plain"))
    script = REFUSED_KINDS[kind].format(reached=REACHED, refused=REFUSED)
    rendered = render_one(shared, web.url("/page"), page_with(script, body="<div id='app'>The page itself</div>"))
    assert "The page itself" in rendered.html
    if kind != "navigation":
        assert 'data-outcome="refused"' in rendered.html
    assert rendered.refused == 1
    assert [request.path for request in web.requests] == (["/wait"] if kind == "navigation" else [])


def test_a_popup_is_closed_at_once(web: WebServer, shared: Shared) -> None:
    web.route("/wait", Reply(body="", content_type="text/plain", delay=0.5))
    script = (
        "const popup = window.open('/elsewhere'); "
        "fetch('/wait').then(() => { app.textContent = popup === null || popup.closed ? 'closed' : 'open'; });"
    )
    rendered = render_one(shared, web.url("/page"), page_with(script))
    assert '<div id="app">closed</div>' in rendered.html
    assert web.hits("/elsewhere") == 0


def test_a_browser_that_does_not_start_says_so_and_leaves_nothing_running(tmp_path: Any) -> None:
    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)

    async def start() -> None:
        await Renderer(executable=str(broken)).start()

    def drivers() -> set[int]:
        """The Playwright drivers (node processes running `cli.js run-driver`) under this process: the module's
        Renderer's, if started, and any a failed start left behind. Not its browser's processes, which come and go."""
        found = set()
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if "run-driver" in child.cmdline():
                    found.add(child.pid)
        return found

    running = drivers()
    with pytest.raises(RenderError, match=rf"Chromium at {broken} did not start \(.*\): check that it runs"):
        asyncio.run(start())
    # The driver it started for the browser was stopped with it.
    assert drivers() == running
