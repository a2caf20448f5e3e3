"""What one rendered page may do and has done: which of its requests are refused, what a navigation is, when the
page has settled, and closing a page the browser opened on its own (a popup)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from playwright.async_api import Page, Request

# Requests a rendered page never needs for its text, each refused before any fetch.
_REFUSED_TYPES = frozenset({"media", "websocket", "eventsource"})
_SETTLE_POLL_SECONDS = 0.02


@dataclass
class PageRequests:
    """One page's request counts, and its route handlers still running (cancelled when the page ends)."""

    fulfilled: int = 0
    refused: int = 0
    document_served: bool = False
    crashed: bool = False
    handlers: set[asyncio.Task[Any]] = field(default_factory=set)
    last_active: float = field(default_factory=time.monotonic)
    """When a request last started or ended (time.monotonic())."""

    async def settled(self, *, quiet: float, within: float) -> None:
        """Return once no request has been out for `quiet` seconds, or after `within` seconds at most.

        Playwright's "networkidle" waits a fixed 500 ms of quiet; every request a page makes passes
        through the route handlers here, so a shorter quiet, counted from them, says the same sooner.
        """
        deadline = time.monotonic() + within
        while (now := time.monotonic()) < deadline:
            if not self.handlers and now - self.last_active >= quiet:
                return
            await asyncio.sleep(_SETTLE_POLL_SECONDS)


class BrowserLost(Exception):
    """The browser went away while a page was rendering in it."""


async def unless_lost(gone: asyncio.Event, work: Coroutine[Any, Any, str]) -> str:
    """`work`'s result; BrowserLost as soon as `gone` is set, the browser known to be gone (`work` cancelled)."""
    done = asyncio.ensure_future(work)
    lost = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({done, lost}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lost.cancel()
        if not done.done():
            done.cancel()
            with contextlib.suppress(BaseException):
                await done
    if done.cancelled():
        raise BrowserLost()
    return done.result()


def close_soon(page: Page) -> None:
    async def close() -> None:
        with contextlib.suppress(Exception):  # closing the context first closes it just as well
            await page.close()

    asyncio.get_running_loop().create_task(close())


def navigates(request: Request) -> Literal["page", "popup"] | None:
    """What `request` navigates: a page, a new page (a popup), or neither (a subresource, a frame in a page)."""
    from playwright.async_api import Error

    if not request.is_navigation_request():
        return None
    try:
        return "page" if request.frame.parent_frame is None else None
    except Error:  # a navigation asked for before its frame exists opens a new page
        return "popup"


def refusal(url: str, method: str, resource_type: str) -> str | None:
    if not url.startswith(("http://", "https://")):
        return "only http(s) is fetched for a rendered page"
    if method != "GET":
        # A script's POST could change something on the site; rendering only reads.
        return f"{method} requests are refused while rendering"
    if resource_type in _REFUSED_TYPES:
        return f"{resource_type} requests are refused while rendering"
    return None
