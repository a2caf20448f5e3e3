"""The crawl engine: fetches URLs politely and safely and extracts their text, one outcome per URL.

Plain asyncio and httpx with no Dagster in it; the `crawler` resource wraps it. Its config and
outcomes are in `crawl.types`; fetching one URL is `crawl.fetch`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Mapping
from dataclasses import replace

import httpx

from pipelines_dagster.core.crawl.body import ACCEPT_ENCODING
from pipelines_dagster.core.crawl.credentials import HostCredentials
from pipelines_dagster.core.crawl.extract.extracted import DOCX, PDF, Extracted
from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots
from pipelines_dagster.core.crawl.extract.workers import ExtractionError, ExtractionWorkers
from pipelines_dagster.core.crawl.fetch import Fetcher
from pipelines_dagster.core.crawl.host_budget import HostBudget
from pipelines_dagster.core.crawl.render.rule import RenderMemory, RenderMode
from pipelines_dagster.core.crawl.throttle import RequestWaits
from pipelines_dagster.core.crawl.types import (
    CrawlerConfig,
    CrawlOutcome,
    FetchFailed,
    ListSource,
    PreviousFetch,
    UrlSource,
    distinct,
)
from pipelines_dagster.core.security.ssrf import AddressGuard, PinnedTransport, Resolver

# Pages first; documents (PDF, DOCX) after them, which a server that negotiates then offers only when it has no page.
_ACCEPT = f"text/html,application/xhtml+xml,text/plain;q=0.9,{PDF};q=0.8,{DOCX};q=0.8"
# URLs started ahead of the slowest one: enough to keep every host slot busy, few enough that
# pages waiting for extraction do not pile up in memory.
_WINDOW_PER_SLOT = 4


class Crawler:
    """Crawls URLs into outcomes.

    Extraction runs in up to `extract_workers` worker processes: the first starts as soon as a
    crawl meets a page it has no previous fetch of, more only while pages wait for extraction,
    and all are kept for later crawls until close().

    With a `host_budget`, per-host concurrency and Crawl-delay hold across every crawl sharing its
    locks backend, not only within this crawl; with `slots`, the extraction workers of every crawl
    sharing them are capped together (one slot per core of the machine, say).
    """

    def __init__(
        self,
        config: CrawlerConfig,
        *,
        resolver: Resolver | None = None,
        host_budget: HostBudget | None = None,
        slots: ExtractionSlots | None = None,
    ) -> None:
        self.config = config
        self._resolver = resolver
        self._host_budget = host_budget
        self._slots = slots
        self._workers: ExtractionWorkers | None = None
        self._workers_lock = threading.Lock()

    def crawl(
        self,
        urls: Iterable[str],
        *,
        previous: Mapping[str, PreviousFetch] | None = None,
        render: RenderMode = RenderMode.NEVER,
    ) -> AsyncIterator[CrawlOutcome]:
        """Yield one outcome per distinct URL as each completes. A failed URL never stops the crawl.

        `previous` maps a URL to what the last crawl of it returned, for conditional requests.
        """
        return self.crawl_source(ListSource(urls), previous=previous, render=render)

    async def crawl_source(
        self,
        source: UrlSource,
        *,
        previous: Mapping[str, PreviousFetch] | None = None,
        replay: Callable[[str], CrawlOutcome | None] | None = None,
        waits: RequestWaits | None = None,
        render: RenderMode = RenderMode.NEVER,
        render_memory: RenderMemory | None = None,
        credentials: HostCredentials | None = None,
        user_agent: str | None = None,
        robots_waived: frozenset[str] = frozenset(),
    ) -> AsyncIterator[CrawlOutcome]:
        """`crawl` over the URLs `source` hands out as the crawl goes: it may add URLs as outcomes
        come back, and the crawl ends when it has none left and none is in flight. A URL `replay`
        has an outcome for (an earlier run of the same crawl stored it) is not requested: that
        outcome comes back in its place, so discovery goes on from it as from a fetch. `waits`
        counts how long requests waited for each limiter (Crawl-delay, host budget, slots).

        Under `render` `always`, or `auto` when a page needs it, a page's text is read from the page as
        Chromium renders it (`render.pages_text`), every request of the page through this crawl's guards;
        `render_memory` is what `auto` knows of the hosts already (the previous crawl's verdicts).

        `credentials` go on every request to one of their hosts and on no other: a page, a robots.txt, a
        sitemap, a rendered page's subresource, each hop of a redirect judged by its own URL. `user_agent`
        replaces the crawler's, in requests and in reading robots.txt; pages on the `robots_waived` hosts are
        fetched without it (their owner's choice)."""
        config = self.config if user_agent is None else replace(self.config, user_agent=user_agent)
        known = previous or {}
        if not known:
            self._start_workers_early()  # nothing was crawled before: every page will need extracting
        guard = AddressGuard(config.network, resolver=self._resolver)
        limits = httpx.Limits(
            max_connections=config.global_concurrency, max_keepalive_connections=config.global_concurrency
        )
        async with httpx.AsyncClient(
            transport=PinnedTransport(guard, limits=limits),
            headers={"User-Agent": config.user_agent, "Accept": _ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
            timeout=httpx.Timeout(config.total_timeout, connect=config.connect_timeout),
            follow_redirects=False,  # each hop is checked by the Fetcher before it is requested
            auth=_OwnHosts(credentials) if credentials is not None else None,
        ) as client:
            pages = None
            if render is not RenderMode.NEVER:
                from pipelines_dagster.core.crawl.render.pages_text import PageText  # only a crawl that may render

                pages = PageText(
                    config,
                    mode=render,
                    extract=self._extract,
                    fetch_resource=lambda url: run.fetch_resource(url),
                    memory=render_memory,
                )
            run = Fetcher(
                config,
                guard=guard,
                client=client,
                extract=self._extract if pages is None else pages.extract,
                source=source,
                previous=known,
                host_budget=self._host_budget,
                waits=waits,
                robots_waived=robots_waived,
            )
            await source.prepare(run)
            window = _WINDOW_PER_SLOT * config.global_concurrency
            pending: set[asyncio.Task[CrawlOutcome]] = set()
            # Tasks queue themselves here as they finish, so each outcome costs O(1) to collect.
            finished: asyncio.Queue[asyncio.Task[CrawlOutcome]] = asyncio.Queue()
            try:
                while True:
                    for url in source.take(window - len(pending)) if len(pending) < window else ():
                        if replay is not None and (stored := replay(url)) is not None:
                            task = asyncio.create_task(_replayed(stored))
                            task.add_done_callback(finished.put_nowait)
                            pending.add(task)
                            continue
                        hint = known.get(url)
                        if hint is None:
                            self._start_workers_early()  # a page not seen before will need extracting
                        task = asyncio.create_task(run.crawl_url(url, hint))
                        task.add_done_callback(finished.put_nowait)
                        pending.add(task)
                    if not pending:
                        # What the source held back is stored now; storing it may find more pages.
                        leftover = source.finish()
                        if not leftover:
                            return
                        for key, ready in leftover:
                            yield _stored_as(key, ready)
                        continue
                    task = await finished.get()
                    pending.discard(task)
                    for key, ready in source.done(task.result()):
                        yield _stored_as(key, ready)
            finally:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                if pages is not None:
                    await pages.close()

    def crawl_all(
        self, urls: Iterable[str], *, previous: Mapping[str, PreviousFetch] | None = None
    ) -> list[CrawlOutcome]:
        """Crawl to the end in a new event loop and return the outcomes in input order.

        For synchronous callers; inside a running event loop iterate `crawl` instead.
        """
        ordered = list(distinct(urls))

        async def collect() -> list[CrawlOutcome]:
            return [outcome async for outcome in self.crawl(ordered, previous=previous)]

        position = {url: index for index, url in enumerate(ordered)}
        return sorted(asyncio.run(collect()), key=lambda outcome: position[outcome.url])

    def close(self) -> None:
        """Stop the extraction workers; a later crawl starts new ones."""
        with self._workers_lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()

    def __enter__(self) -> Crawler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start_workers(self) -> ExtractionWorkers:
        """The extraction workers, started if need be (starting them does not wait for them)."""
        with self._workers_lock:
            if self._workers is None:
                count = self.config.extract_workers or usable_cores()
                self._workers = ExtractionWorkers(count, timeout=self.config.extract_timeout, slots=self._slots)
            return self._workers

    def _start_workers_early(self) -> None:
        """Start the workers before a page needs them; a failure to start is each page's to report."""
        with contextlib.suppress(ExtractionError):
            self._start_workers()

    async def _extract(
        self, body: bytes, *, media_type: str, charset: str | None, url: str, links: bool = False
    ) -> Extracted:
        try:
            workers = self._start_workers()
            return await workers.extract_async(body, media_type=media_type, charset=charset, url=url, links=links)
        except ExtractionError as exc:
            raise FetchFailed(str(exc)) from None


class _OwnHosts(httpx.Auth):
    """A connector's credentials on each request to one of its own hosts. httpx asks per request, and every
    request the crawl makes is one hop (the Fetcher follows redirects itself), so each hop is judged by its
    own URL; a rendered page's subresources come through the same client."""

    def __init__(self, credentials: HostCredentials) -> None:
        self._credentials = credentials

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(self._credentials.headers_for(str(request.url), cookie=request.headers.get("cookie")))
        yield request


async def _replayed(outcome: CrawlOutcome) -> CrawlOutcome:
    return outcome


def _stored_as(key: str, outcome: CrawlOutcome) -> CrawlOutcome:
    """`outcome` under the URL its source stores it as (a site crawl's page under its final URL)."""
    return outcome if key == outcome.url else replace(outcome, url=key)


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
