"""The crawl engine: fetches URLs politely and safely and extracts their text, one outcome per URL.

Plain asyncio and httpx with no Dagster in it; the `crawler` resource wraps it. Its config and
outcomes are in `crawl_types`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

import httpx
from protego import Protego

from pipelines_dagster.core.crawl_types import (
    CrawlerConfig,
    CrawlOutcome,
    CrawlStatus,
    ListSource,
    PreviousFetch,
    UrlSource,
    distinct,
)
from pipelines_dagster.core.extract_workers import ExtractionError, ExtractionWorkers
from pipelines_dagster.core.extracted import HTML_TYPES, PLAIN_TEXT, Extracted
from pipelines_dagster.core.host_budget import HostBudget, HostBudgetError
from pipelines_dagster.core.ssrf import AddressError, AddressGuard, PinnedTransport, Resolver
from pipelines_dagster.core.validation import InvalidInputError, validate_url

PAGE_TYPES = HTML_TYPES | {PLAIN_TEXT}
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9"
# URLs started ahead of the slowest one: enough to keep every host slot busy, few enough that
# pages waiting for extraction do not pile up in memory.
_WINDOW_PER_SLOT = 4
_DRAIN_LIMIT = 64 * 1024


class Crawler:
    """Crawls URLs into outcomes.

    Extraction runs in up to `extract_workers` worker processes: the first starts as soon as a
    crawl meets a page it has no previous fetch of, more only while pages wait for extraction,
    and all are kept for later crawls until close().

    With a `host_budget`, per-host concurrency and Crawl-delay hold across every crawl sharing its
    locks backend, not only within this crawl.
    """

    def __init__(
        self, config: CrawlerConfig, *, resolver: Resolver | None = None, host_budget: HostBudget | None = None
    ) -> None:
        self.config = config
        self._resolver = resolver
        self._host_budget = host_budget
        self._workers: ExtractionWorkers | None = None
        self._workers_lock = threading.Lock()

    def crawl(
        self, urls: Iterable[str], *, previous: Mapping[str, PreviousFetch] | None = None
    ) -> AsyncIterator[CrawlOutcome]:
        """Yield one outcome per distinct URL as each completes. A failed URL never stops the crawl.

        `previous` maps a URL to what the last crawl of it returned, for conditional requests.
        """
        return self.crawl_source(ListSource(urls), previous=previous)

    async def crawl_source(
        self,
        source: UrlSource,
        *,
        previous: Mapping[str, PreviousFetch] | None = None,
        replay: Callable[[str], CrawlOutcome | None] | None = None,
    ) -> AsyncIterator[CrawlOutcome]:
        """`crawl` over the URLs `source` hands out as the crawl goes: it may add URLs as outcomes
        come back, and the crawl ends when it has none left and none is in flight. A URL `replay`
        has an outcome for (an earlier run of the same crawl stored it) is not requested: that
        outcome comes back in its place, so discovery goes on from it as from a fetch."""
        config = self.config
        known = previous or {}
        if not known:
            self._start_workers_early()  # nothing was crawled before: every page will need extracting
        guard = AddressGuard(config.network, resolver=self._resolver)
        limits = httpx.Limits(
            max_connections=config.global_concurrency, max_keepalive_connections=config.global_concurrency
        )
        async with httpx.AsyncClient(
            transport=PinnedTransport(guard, limits=limits),
            headers={"User-Agent": config.user_agent, "Accept": _ACCEPT},
            timeout=httpx.Timeout(config.total_timeout, connect=config.connect_timeout),
            follow_redirects=False,  # each hop is checked by _CrawlRun before it is requested
        ) as client:
            run = _CrawlRun(
                config,
                guard=guard,
                client=client,
                extract=self._extract,
                source=source,
                previous=known,
                host_budget=self._host_budget,
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
                count = self.config.extract_workers or _usable_cores()
                self._workers = ExtractionWorkers(count, timeout=self.config.extract_timeout)
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
            raise _Failed(str(exc)) from None


class _Failed(Exception):
    """Ends one URL as `failed`; the message is the outcome's reason."""


@dataclass
class _Progress:
    """What is known about one URL so far, kept for its outcome even when it fails midway."""

    final_url: str
    attempts: int = 0
    http_status: int | None = None
    previous: PreviousFetch | None = None
    """What the last crawl left of the page the requests are for: the URL's own, or (when a source
    stores pages under their final URL) a redirect target's."""


@dataclass(frozen=True)
class _Response:
    status: int
    headers: httpx.Headers
    media_type: str = ""
    charset: str | None = None
    body: bytes = b""
    raw_hash: str | None = None


class _CrawlRun:
    """One crawl's shared state: the HTTP client, the address guard, host slots, robots rules and pacing."""

    def __init__(
        self,
        config: CrawlerConfig,
        *,
        guard: AddressGuard,
        client: httpx.AsyncClient,
        extract: Callable[..., Awaitable[Extracted]],
        source: UrlSource,
        previous: Mapping[str, PreviousFetch],
        host_budget: HostBudget | None = None,
    ) -> None:
        self._config = config
        self._source = source
        self._previous = previous
        self._guard = guard
        self._client = client
        self._extract = extract
        self._host_budget = host_budget
        self._global_slots = asyncio.Semaphore(config.global_concurrency)
        self._host_slots: dict[str, asyncio.Semaphore] = {}
        # Requests queued for a host[:port], to which a finished request hands its shared slot.
        self._queued: collections.Counter[str] = collections.Counter()
        self._robots: dict[str, Protego | None] = {}
        self._robots_locks: dict[str, asyncio.Lock] = {}
        self._crawl_delays: dict[str, float] = {}
        self._next_request_at: dict[str, float] = {}

    async def crawl_url(self, url: str, previous: PreviousFetch | None) -> CrawlOutcome:
        started = time.monotonic()
        fetched_at = datetime.now(UTC)
        progress = _Progress(final_url=url)

        def outcome(status: CrawlStatus, **fields: Any) -> CrawlOutcome:
            return CrawlOutcome(
                url=url,
                final_url=progress.final_url,
                status=status,
                fetched_at=fetched_at,
                elapsed=time.monotonic() - started,
                attempts=progress.attempts,
                http_status=progress.http_status,
                **fields,
            )

        try:
            response = await self._fetch(url, previous=previous, progress=progress, media_types=PAGE_TYPES)
            previous = progress.previous
            etag = response.headers.get("etag")
            last_modified = response.headers.get("last-modified")
            if response.status == 304:
                if previous is None:
                    raise _Failed("HTTP 304 Not Modified to a request that was not conditional")
                return outcome(
                    "success",
                    unchanged=True,
                    raw_hash=previous.raw_hash,
                    content_hash=previous.content_hash,
                    etag=etag or previous.etag,
                    last_modified=last_modified or previous.last_modified,
                )
            if previous is not None and previous.raw_hash == response.raw_hash:
                return outcome(
                    "success",
                    unchanged=True,
                    raw_hash=response.raw_hash,
                    content_hash=previous.content_hash,
                    etag=etag,
                    last_modified=last_modified,
                )
            extracted = await self._extract(
                response.body,
                media_type=response.media_type,
                charset=response.charset,
                url=progress.final_url,
                links=self._source.wants_links,
            )
            return outcome(
                "success" if extracted.content_hash else "empty",
                content=extracted.content,
                metadata=extracted.metadata,
                error=None if extracted.content_hash else "no text could be extracted from the page",
                content_hash=extracted.content_hash,
                raw_hash=response.raw_hash,
                etag=etag,
                last_modified=last_modified,
                links=extracted.links,
                canonical=extracted.canonical,
            )
        except _Failed as exc:
            return outcome("failed", error=str(exc))
        except Exception as exc:  # continue-on-fail: a bug met on one page must not end the crawl
            return outcome("failed", error=f"unexpected error: {exc!r}")

    async def fetch_body(self, url: str, *, max_bytes: int) -> bytes | None:
        """The body a 200 answers at `url` with (robots.txt, a sitemap), through every guard a page
        request passes; None when there is none to read. Bodies over `max_bytes` are refused."""
        progress = _Progress(final_url=url)
        try:
            response = await self._fetch(url, previous=None, progress=progress, media_types=None)
        except _Failed:
            return None
        if response.status != 200 or len(response.body) > max_bytes:
            return None
        return response.body

    async def _fetch(
        self,
        url: str,
        *,
        previous: PreviousFetch | None,
        progress: _Progress,
        media_types: frozenset[str] | None,
        obey_robots: bool = True,
    ) -> _Response:
        """The final response for `url`, following redirects ourselves so every hop is checked."""
        current = _checked_url(url)
        progress.previous = previous
        for _ in range(self._config.max_redirects + 1):
            progress.final_url = current
            target = httpx.URL(current)  # parsed once per hop: host slot, robots origin and request
            host = _host(target)
            try:
                async with asyncio.timeout(self._config.connect_timeout):
                    await self._guard.addresses(host)
            except AddressError as exc:
                raise _Failed(str(exc)) from None
            except TimeoutError:
                raise _Failed(f"resolving {host!r} timed out after {self._config.connect_timeout:g} s") from None
            if obey_robots and self._config.obey_robots and not await self._robots_allow(current, target):
                raise _Failed("disallowed by robots.txt")
            response = await self._request(
                target, host=host, previous=progress.previous, progress=progress, media_types=media_types
            )
            if response.status not in REDIRECT_STATUSES:
                return response
            location = response.headers.get("location")
            if not location:
                raise _Failed(f"HTTP {response.status} redirect without a Location header")
            current = _checked_url(urljoin(current, location))
            if not self._source.allows(current):
                raise _Failed(f"redirected out of the crawl's scope, to {current}; not followed")
            # A site crawl stores the page under the redirect's target: the next hop is conditional
            # on what the last crawl stored there.
            if progress.previous is None and (key := self._source.stored_key(current)) is not None:
                progress.previous = self._previous.get(key)
        raise _Failed(f"too many redirects (more than {self._config.max_redirects})")

    async def _request(
        self,
        url: httpx.URL,
        *,
        host: str,
        previous: PreviousFetch | None,
        progress: _Progress,
        media_types: frozenset[str] | None,
    ) -> _Response:
        """One hop's response, retrying 429, 5xx, timeouts and connection errors with backoff."""
        config = self._config
        headers = _conditional_headers(previous)
        attempt = 0
        while True:
            attempt += 1
            progress.attempts = attempt
            retry_after: float | None = None
            try:
                response = await self._send(url, host=host, headers=headers, media_types=media_types, progress=progress)
            except (AddressError, HostBudgetError) as exc:
                raise _Failed(str(exc)) from None
            except httpx.ConnectTimeout:
                reason = f"connect timed out after {config.connect_timeout:g} s"
            except (httpx.TimeoutException, TimeoutError):
                reason = f"timed out after {config.total_timeout:g} s"
            except httpx.TransportError as exc:
                reason = f"connection failed: {exc or type(exc).__name__}"
            else:
                if response.status == 429 or response.status >= 500:
                    reason = f"HTTP {response.status}"
                    retry_after = retry_after_seconds(response.headers.get("retry-after"))
                elif response.status < 300 or response.status == 304 or response.status in REDIRECT_STATUSES:
                    return response
                else:
                    raise _Failed(f"HTTP {response.status}")
            if attempt >= config.max_attempts:
                raise _Failed(reason if attempt == 1 else f"{reason} (gave up after {attempt} attempts)")
            backoff = config.backoff_base * config.backoff_factor ** (attempt - 1)
            await asyncio.sleep(min(backoff if retry_after is None else retry_after, config.max_retry_delay))

    async def _send(
        self,
        url: httpx.URL,
        *,
        host: str,
        headers: dict[str, str],
        media_types: frozenset[str] | None,
        progress: _Progress,
    ) -> _Response:
        """One attempt. A 2xx body is read (checked for type and size) before the slots are freed."""
        config = self._config
        delay = await self._pace(url)
        async with (
            self._slots(url, host=host, delay=delay),
            asyncio.timeout(config.total_timeout),
            self._client.stream("GET", url, headers=headers) as response,
        ):
            progress.http_status = response.status_code
            if not response.is_success:
                await _drain(response)
                return _Response(status=response.status_code, headers=response.headers)
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_types is not None and media_type not in media_types:
                raise _Failed(
                    f"unsupported content type {media_type or '(none declared)'!r}; "
                    "only HTML, XHTML and plain text pages are crawled"
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > config.max_body_bytes:
                raise _Failed(f"body larger than {config.max_body_bytes} bytes ({declared} declared)")
            body = bytearray()
            digest = hashlib.sha256()
            try:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > config.max_body_bytes:
                        raise _Failed(f"body larger than {config.max_body_bytes} bytes")
                    digest.update(chunk)
            except httpx.DecodingError as exc:
                raise _Failed(f"the body could not be decoded: {exc}") from None
            return _Response(
                status=response.status_code,
                headers=response.headers,
                media_type=media_type,
                charset=response.charset_encoding,
                body=bytes(body),
                raw_hash=digest.hexdigest(),
            )

    async def _pace(self, url: httpx.URL) -> float:
        """Wait for the origin's next request time when its robots.txt asks for a Crawl-delay; that delay."""
        if not self._crawl_delays:
            return 0.0
        origin = _origin(url)
        delay = self._crawl_delays.get(origin)
        if not delay:
            return 0.0
        # One event loop and no await until the slot is booked: each request gets its own time.
        now = time.monotonic()
        start = max(now, self._next_request_at.get(origin, now))
        self._next_request_at[origin] = start + delay
        if start > now:
            await asyncio.sleep(start - now)
        return delay

    @contextlib.asynccontextmanager
    async def _slots(self, url: httpx.URL, *, host: str, delay: float) -> AsyncIterator[None]:
        """Hold a host slot of this crawl, one of the budget shared with other crawls, and a global slot.

        In that order: a request queued behind a busy host must hold neither a shared slot another
        crawl could use nor a global slot that a request to an idle host could use. Under a
        Crawl-delay the host's turn, shared with other crawls, comes last and lasts the request.
        """
        host_slots = self._host_slots.get(host)
        if host_slots is None:
            host_slots = self._host_slots[host] = asyncio.Semaphore(self._config.per_host_concurrency)
        budget = self._host_budget
        shared_host = url.netloc.decode("ascii")  # host[:port], lower-cased, IDNA, no default port
        shared = (
            budget.slot(
                shared_host,
                concurrency=self._config.per_host_concurrency,
                waiting=lambda: self._queued[shared_host],
            )
            if budget is not None
            else contextlib.nullcontext()
        )
        turn = budget.turn(shared_host, delay=delay) if budget is not None and delay else contextlib.nullcontext()
        self._queued[shared_host] += 1
        try:
            await host_slots.acquire()
        finally:
            self._queued[shared_host] -= 1
        try:
            async with shared, self._global_slots, turn:
                yield
        finally:
            host_slots.release()

    async def robots_sitemaps(self, url: str) -> list[str]:
        """The sitemaps the robots.txt of `url`'s origin names (read once per crawl, as for its rules)."""
        rules = await self._robots_of(httpx.URL(url))
        return list(rules.sitemaps) if rules is not None else []

    async def _robots_allow(self, url: str, parts: httpx.URL) -> bool:
        rules = await self._robots_of(parts)
        return rules is None or rules.can_fetch(url, self._config.user_agent)

    async def _robots_of(self, parts: httpx.URL) -> Protego | None:
        origin = _origin(parts)
        if origin not in self._robots:
            # One robots.txt request per origin even when many of its URLs start together.
            async with self._robots_locks.setdefault(origin, asyncio.Lock()):
                if origin not in self._robots:
                    rules = self._robots[origin] = await self._load_robots(origin)
                    delay = rules.crawl_delay(self._config.user_agent) if rules is not None else None
                    if delay:
                        self._crawl_delays[origin] = min(float(delay), self._config.max_crawl_delay)
        return self._robots[origin]

    async def _load_robots(self, origin: str) -> Protego | None:
        """The origin's robots.txt rules, or None (allow all) when it has none or cannot be read."""
        robots_url = f"{origin}/robots.txt"
        try:
            response = await self._fetch(
                robots_url, previous=None, progress=_Progress(robots_url), media_types=None, obey_robots=False
            )
        except _Failed:
            return None
        if response.status != 200:
            return None
        return Protego.parse(response.body.decode("utf-8", errors="replace"))


async def _replayed(outcome: CrawlOutcome) -> CrawlOutcome:
    return outcome


def _stored_as(key: str, outcome: CrawlOutcome) -> CrawlOutcome:
    """`outcome` under the URL its source stores it as (a site crawl's page under its final URL)."""
    return outcome if key == outcome.url else replace(outcome, url=key)


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a Retry-After header (delta seconds or an HTTP date) asks to wait; None if absent or invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


async def _drain(response: httpx.Response) -> None:
    """Read a short redirect or error body, so its connection can serve the next request."""
    seen = 0
    async for chunk in response.aiter_raw():
        seen += len(chunk)
        if seen > _DRAIN_LIMIT:
            return  # not worth reading: leaving it unread closes the connection instead


def _conditional_headers(previous: PreviousFetch | None) -> dict[str, str]:
    # The validators came from the final response of this URL's redirect chain; sending them on
    # every hop is harmless because a redirecting hop has other validators and never matches.
    headers: dict[str, str] = {}
    if previous is not None and previous.etag:
        headers["If-None-Match"] = previous.etag
    if previous is not None and previous.last_modified:
        headers["If-Modified-Since"] = previous.last_modified
    return headers


def _checked_url(url: str) -> str:
    try:
        return validate_url(url)
    except InvalidInputError as exc:
        raise _Failed(exc.message) from None


def _origin(url: httpx.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode('ascii')}"


def _host(url: httpx.URL) -> str:
    # The ASCII (IDNA) form, the one httpcore hands the network backend, so both share guard answers.
    return url.raw_host.decode("ascii")


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
