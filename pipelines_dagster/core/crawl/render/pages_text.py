"""A crawl's pages' text under its render setting: the plain extraction, the rendered page's, or the plain one
first and the rendered one when the `auto` rule says the page needs it.

One per crawl, on the crawl's event loop: the browser is started at the first page that needs it (a crawl
that renders nothing never starts one) and closed with the crawl.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from pipelines_dagster.core.crawl.extract.extracted import HTML_TYPES, Extracted
from pipelines_dagster.core.crawl.render.browser import FetchResource, Renderer, RenderError
from pipelines_dagster.core.crawl.render.rule import RenderMemory, RenderMode, Step, needs_rendering
from pipelines_dagster.core.crawl.types import CrawlerConfig, FetchFailed

Extract = Callable[..., Awaitable[Extracted]]
"""body, *, media_type, charset, url, links -> the page's text, as the extraction workers give it."""


class PageText:
    """`extract` with the Fetcher's signature: a page's text under `mode`, rendering through `fetch_resource`
    (the crawl's guarded fetch) when it renders. What `auto` learns per host goes into `memory`."""

    def __init__(
        self,
        config: CrawlerConfig,
        *,
        mode: RenderMode,
        extract: Extract,
        fetch_resource: FetchResource,
        memory: RenderMemory | None = None,
    ) -> None:
        self._config = config
        self.mode = mode
        self._extract = extract
        self._fetch_resource = fetch_resource
        self.memory = memory if memory is not None else RenderMemory()
        self._renderer: Renderer | None = None
        self._unavailable: str | None = None
        self._starting = asyncio.Lock()

    async def extract(
        self, body: bytes, *, media_type: str, charset: str | None, url: str, links: bool = False
    ) -> Extracted:
        def plain() -> Awaitable[Extracted]:
            return self._extract(body, media_type=media_type, charset=charset, url=url, links=links)

        if self.mode is RenderMode.NEVER or media_type not in HTML_TYPES:
            return await plain()
        if self.mode is RenderMode.ALWAYS or self.memory.next_step(url) is Step.RENDER:
            return await self._rendered(body, media_type=media_type, charset=charset, url=url, links=links)
        extracted = await plain()
        needed = needs_rendering(media_type=media_type, html=body, text=extracted.content)
        self.memory.record(url, needed=needed)
        if not needed:
            return extracted
        return await self._rendered(body, media_type=media_type, charset=charset, url=url, links=links)

    async def close(self) -> None:
        renderer, self._renderer = self._renderer, None
        if renderer is not None:
            await renderer.close()

    async def _rendered(self, body: bytes, *, media_type: str, charset: str | None, url: str, links: bool) -> Extracted:
        renderer = await self._browser()
        content_type = f"{media_type}; charset={charset}" if charset else media_type
        try:
            rendered = await renderer.render(
                url,
                body,
                fetch_resource=self._fetch_resource,
                budget_seconds=self._config.render_timeout,
                content_type=content_type,
            )
        except RenderError as exc:
            raise FetchFailed(f"rendering failed: {exc}") from None
        html = rendered.html.encode("utf-8")
        if len(html) > self._config.max_body_bytes:
            raise FetchFailed(
                f"the rendered page is larger than {self._config.max_body_bytes} bytes ({len(html)}); not extracted"
            )
        extracted = await self._extract(html, media_type="text/html", charset="utf-8", url=url, links=links)
        return dataclasses.replace(extracted, rendered=True, render_seconds=rendered.seconds)

    async def _browser(self) -> Renderer:
        """The crawl's browser, started once; a browser that cannot start fails each page that needs it, saying why."""
        async with self._starting:
            if self._renderer is None and self._unavailable is None:
                renderer = Renderer(executable=self._config.chromium, pages=self._config.render_pages)
                try:
                    self._renderer = await renderer.start()
                except RenderError as exc:
                    self._unavailable = str(exc)
            if self._renderer is None:
                raise FetchFailed(f"the page needs rendering and the browser is not available: {self._unavailable}")
            return self._renderer
