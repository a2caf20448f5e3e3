"""The guarded headless browser: the system Chromium, driven by Playwright, renders a page the crawler has
already fetched, and reaches the network only through the fetch the crawler hands it.

Chromium resolves names and opens sockets itself, so it is launched with its own network shut (the
switches in `NETWORK_SHUT`) and every request a page makes is routed: the document is fulfilled from the
body the crawler fetched, every other http(s) request from the caller's guarded fetch, or refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Self

from pipelines_dagster.core.crawl.extract.workers import worker_environment
from pipelines_dagster.core.crawl.render.pages import (
    BrowserLost,
    PageRequests,
    close_soon,
    navigates,
    refusal,
    unless_lost,
)
from pipelines_dagster.core.crawl.render.processes import is_running, kill_marked, kill_tree, launched_by, tree_memory
from pipelines_dagster.core.crawl.types import Resource

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Playwright, Route, WebSocketRoute

CHROMIUM = "/usr/bin/chromium"
MiB = 1024 * 1024

# Chromium never reaches the network by itself: a request that escaped routing would find no host and
# no route out (each wall alone holds: tests/core/crawl/render/test_browser.py). Playwright's own
# defaults already stop background networking and component updates; they are named again here
# because the guard depends on them.
NETWORK_SHUT = (
    # No host resolves, whoever asks (a page, a prefetch, DNS-over-HTTPS, the proxy below); the rule
    # takes address literals too, so a page's "http://10.0.0.1/" fails as a name would.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--dns-prefetch-disable",
    # Should a connection get past the resolver, it goes to a proxy whose name never resolves;
    # "<-loopback>" takes back Chromium's implicit direct route to loopback. A fixed proxy also means
    # no proxy autodetection (WPAD) is tried.
    "--proxy-server=http://proxy.invalid:1",
    "--proxy-bypass-list=<-loopback>",
    # WebRTC sends UDP to any address a script names, past both routing and the proxy: proxied only.
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-pings",
)
_CLOSE_SECONDS = 5.0
_CRASHED = "the browser crashed or was killed while rendering the page; it is restarted for the next page"
# A killed browser's pages report their end first; its own disconnection follows within milliseconds.
_DISCONNECT_SECONDS = 1.0

# Three turns of the page's task loop: a response's body read, its parse and the script's write are a task each.
_TASK_TURNS = "() => new Promise(done => setTimeout(() => setTimeout(() => setTimeout(done, 0), 0), 0))"

FetchResource = Callable[[str], Awaitable[Resource | str]]
"""url -> what to fulfil the page's request with, or why it is refused."""


@dataclass(frozen=True)
class Rendered:
    html: str
    fulfilled: int
    """Requests answered: the document and the subresources the guarded fetch returned."""
    refused: int
    """Requests aborted: refused kinds, other schemes, WebSockets, and what the guarded fetch refused."""
    seconds: float


class RenderError(Exception):
    """One page did not render; the message says why, for the page's outcome."""


@dataclass
class _Launch:
    """One launch of the browser: its root process, and why the renderer stopped it, once it has."""

    browser: Browser
    pid: int
    marker: str
    stopped: str | None = None
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when Playwright reports the browser gone, or the watchdog finds its process ended."""


class Renderer:
    """One browser for a crawl process, rendering up to `pages` pages at once, each in a fresh context.

    The browser's V8 heap is capped at `heap_mib` per renderer process, and a watchdog kills the whole
    browser when its process tree holds more than `memory_cap_mib`: the pages in flight fail with that
    reason, and the next page relaunches it, as after a crash.
    """

    def __init__(
        self,
        *,
        executable: str = CHROMIUM,
        pages: int = 2,
        heap_mib: int = 512,
        memory_cap_mib: int = 2048,
        settle_seconds: float = 2.0,
        quiet_seconds: float = 0.2,
        watch_seconds: float = 0.5,
    ) -> None:
        self._executable = executable
        self._slots = asyncio.Semaphore(pages)
        self._heap_mib = heap_mib
        self._memory_cap_mib = memory_cap_mib
        self._settle_seconds = settle_seconds
        self._quiet_seconds = quiet_seconds
        self._watch_seconds = watch_seconds
        self._playwright: Playwright | None = None
        self._launch: _Launch | None = None
        self._launching = asyncio.Lock()
        self._watchdog: asyncio.Task[None] | None = None

    async def start(self) -> Self:
        if not os.path.exists(self._executable):
            raise RenderError(
                f"no Chromium at {self._executable}: install the system package (apt-get install chromium) "
                "or pass the browser's path"
            )
        from playwright.async_api import async_playwright  # lazily: the CLI must start without it

        self._playwright = await async_playwright().start()
        try:
            await self._running()
        except BaseException:
            await self.close()  # the Playwright driver started: it must not outlive a failed start
            raise
        self._watchdog = asyncio.create_task(self._watch())
        return self

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        if self._launch is not None:
            with contextlib.suppress(Exception):  # a browser that died already has nothing left to close
                await self._launch.browser.close()
        if self._playwright is not None:
            await self._playwright.stop()
        self._launch = self._playwright = self._watchdog = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def browser_pid(self) -> int | None:
        """The browser's root process, while one is launched."""
        return None if self._launch is None else self._launch.pid

    def memory_bytes(self) -> int:
        """What the browser's process tree holds now (proportional set size, see `processes.tree_memory`)."""
        pid = self.browser_pid
        return 0 if pid is None else tree_memory(pid)

    async def render(
        self,
        url: str,
        html: bytes | str,
        *,
        fetch_resource: FetchResource,
        budget_seconds: float,
        content_type: str = "text/html",
    ) -> Rendered:
        """`url`'s document, `html` as the crawler fetched it, rendered; raises RenderError with the reason.

        `budget_seconds` bounds opening the page, loading it, letting its scripts settle and reading
        its HTML; the wait for a free page slot is not part of it.
        """
        async with self._slots:
            launch = await self._running()
            started = time.monotonic()
            requests = PageRequests()
            opened: list[BrowserContext] = []
            try:
                async with asyncio.timeout(budget_seconds):
                    # Nothing survives the page: a fresh context holds its cookies, storage and cache.
                    context = await launch.browser.new_context(service_workers="block", accept_downloads=False)
                    opened.append(context)
                    content = await unless_lost(
                        launch.disconnected, self._load(context, url, html, content_type, fetch_resource, requests)
                    )
            except TimeoutError:
                raise RenderError(
                    f"the page did not render within its budget of {budget_seconds:g} s "
                    "(a script that never ends, or a page that never finishes loading); it was stopped"
                ) from None
            except BrowserLost:
                raise RenderError(launch.stopped or _CRASHED) from None
            except Exception as exc:
                if not _is_playwright_error(exc):
                    raise
                raise RenderError(await self._failure(launch, requests, exc)) from None
            finally:
                for handler in requests.handlers:
                    handler.cancel()
                for context in opened:
                    await self._discard(context, launch)
            return Rendered(content, requests.fulfilled, requests.refused, time.monotonic() - started)

    async def _load(
        self,
        context: BrowserContext,
        url: str,
        html: bytes | str,
        content_type: str,
        fetch_resource: FetchResource,
        requests: PageRequests,
    ) -> str:
        async def route(route: Route) -> None:
            requests.handlers.add(task := asyncio.current_task())  # type: ignore[arg-type]
            requests.last_active = time.monotonic()
            try:
                await _answer(route, html, content_type, fetch_resource, requests)
            except Exception as exc:
                if not _is_playwright_error(exc):
                    raise
                with contextlib.suppress(Exception):  # the page may have closed while its request was out
                    await route.abort("blockedbyclient")
            finally:
                requests.handlers.discard(task)
                requests.last_active = time.monotonic()

        async def refuse_socket(socket: WebSocketRoute) -> None:
            # Not connecting it to the server is what keeps it off the network; closing tells the page.
            requests.refused += 1
            await socket.close(code=1008, reason="WebSockets are refused while rendering")

        context.set_default_timeout(0)  # no Playwright timeout of its own: the page's budget bounds every step
        await context.route("**/*", route)
        await context.route_web_socket("**/*", refuse_socket)
        page = await context.new_page()
        page.on("crash", lambda _page: setattr(requests, "crashed", True))
        # Popups are closed as they open (their navigation refused first): a page is rendered alone.
        context.on("page", lambda opened: None if opened is page else close_soon(opened))
        await page.goto(url, wait_until="load")
        # Scripts that fetch the text after load: wait until the network is quiet, for a while at most
        # (a page that polls is never quiet, and is read as it stands then).
        settle_by = time.monotonic() + self._settle_seconds
        while True:
            await requests.settled(quiet=self._quiet_seconds, within=settle_by - time.monotonic())
            # The last answer reaches the page's script only when its main thread gets to it, which on a busy
            # machine can be after the quiet: the page takes a few turns of its own task loop (its answers'
            # tasks queued before them run first), and if that started a request, it settles again.
            active = requests.last_active
            await page.evaluate(_TASK_TURNS)
            if (requests.last_active == active and not requests.handlers) or time.monotonic() >= settle_by:
                break
        return await page.content()

    async def _running(self) -> _Launch:
        """The browser, launched again when it crashed, was killed, or was stopped by the watchdog."""
        async with self._launching:
            launch = self._launch
            if launch is not None and launch.stopped is None and launch.browser.is_connected():
                return launch
            if launch is not None:
                with contextlib.suppress(Exception):
                    await launch.browser.close()
            if self._playwright is None:
                raise RenderError("the renderer is not started: use `async with Renderer(...)` or start()")
            marker = f"--pipelines-render={uuid.uuid4().hex}"  # finds this launch's process among any others
            environment: dict[str, str | float | bool] = {**worker_environment(dict(os.environ))}
            try:
                browser = await self._playwright.chromium.launch(
                    executable_path=self._executable,
                    args=[*NETWORK_SHUT, f"--js-flags=--max-old-space-size={self._heap_mib}", marker],
                    env=environment,
                    # Chromium's sandbox cannot run as root; as any other user it is kept.
                    chromium_sandbox=os.geteuid() != 0,
                )
            except Exception as exc:
                if not _is_playwright_error(exc):
                    raise
                raise RenderError(
                    f"Chromium at {self._executable} did not start ({str(exc).splitlines()[0]}): "
                    "check that it runs (`chromium --headless --version`), or pass another browser's path"
                ) from None
            pid = launched_by(marker)
            if pid is None:
                await browser.close()
                raise RenderError(
                    "the browser started but its process is not in /proc, so its memory cap cannot be kept: "
                    "run the renderer where /proc shows this user's processes (no hidepid)"
                )
            launch = self._launch = _Launch(browser, pid, marker)

            def disconnected(_browser: Browser) -> None:
                launch.disconnected.set()

            browser.on("disconnected", disconnected)
            return launch

    async def _watch(self) -> None:
        cap = self._memory_cap_mib * MiB
        while True:
            await asyncio.sleep(self._watch_seconds)
            launch = self._launch
            if launch is None or launch.stopped is not None:
                continue
            if not await asyncio.to_thread(is_running, launch.pid):
                # Killed or crashed: its pages fail now, whether or not Playwright has noticed yet, and what is
                # left of it (renderer processes) goes with it.
                launch.stopped = _CRASHED
                launch.disconnected.set()
                await asyncio.to_thread(kill_marked, launch.marker)
                continue
            held = await asyncio.to_thread(tree_memory, launch.pid)
            if held > cap:
                launch.stopped = (
                    f"the browser held {held // MiB} MiB, past its cap of {self._memory_cap_mib} MiB, and was "
                    "restarted; the pages it was rendering failed"
                )
                kill_tree(launch.pid)

    async def _discard(self, context: BrowserContext, launch: _Launch) -> None:
        """Close a page's context; a browser that cannot do so within _CLOSE_SECONDS is hung, and killed."""
        try:
            async with asyncio.timeout(_CLOSE_SECONDS):
                await context.close()
        except TimeoutError:
            if launch.stopped is None:
                launch.stopped = f"the browser did not close a page within {_CLOSE_SECONDS:g} s and was restarted"
                kill_tree(launch.pid)
        except Exception as exc:  # the browser is gone already; the next page relaunches it
            if not _is_playwright_error(exc):
                raise

    async def _failure(self, launch: _Launch, requests: PageRequests, exc: Exception) -> str:
        if launch.stopped is not None:
            return launch.stopped
        if not requests.crashed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_DISCONNECT_SECONDS):
                    await launch.disconnected.wait()
        if launch.disconnected.is_set():
            return _CRASHED
        if requests.crashed:
            return (
                "the page's renderer process crashed (a page that allocates past the "
                f"{self._heap_mib} MiB JavaScript heap cap ends so)"
            )
        return f"the browser could not render the page: {str(exc).splitlines()[0]}"


async def _answer(
    route: Route, html: bytes | str, content_type: str, fetch_resource: FetchResource, requests: PageRequests
) -> None:
    request = route.request
    navigation = navigates(request)
    if navigation is not None:
        # The first is the document, fetched once already; any later one is refused. A script taking
        # the page away gets a 204, which leaves the page as it is (an aborted navigation would put
        # Chromium's error page in its place); a popup's is aborted, for only a popup that has loaded
        # something is reported to be closed.
        if requests.document_served:
            requests.refused += 1
            await (route.abort("blockedbyclient") if navigation == "popup" else route.fulfill(status=204))
            return
        requests.document_served = True
        requests.fulfilled += 1
        await route.fulfill(status=200, body=html, content_type=content_type)
        return
    refused = refusal(request.url, request.method, request.resource_type)
    answer = refused or await fetch_resource(request.url)
    if isinstance(answer, str):
        requests.refused += 1
        await route.abort("blockedbyclient")
        return
    requests.fulfilled += 1
    await route.fulfill(status=answer.status, headers=dict(answer.headers), body=answer.body)


def _is_playwright_error(exc: BaseException) -> bool:
    from playwright.async_api import Error

    return isinstance(exc, Error)
