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

from pipelines_dagster.core.crawl.body import ACCEPT_ENCODING, BodyDecoder, DecodingError
from pipelines_dagster.core.crawl.extract.extracted import HTML_TYPES, PLAIN_TEXT, Extracted
from pipelines_dagster.core.crawl.extract.workers import ExtractionError, ExtractionWorkers
from pipelines_dagster.core.crawl.host_budget import HostBudget, HostBudgetError
from pipelines_dagster.core.crawl.types import (
    CrawlerConfig,
    CrawlOutcome,
    CrawlStatus,
    FetchedBody,
    ListSource,
    PreviousFetch,
    UrlSource,
    distinct,
)
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.security.ssrf import AddressError, AddressGuard, PinnedTransport, Resolver
from pipelines_dagster.core.validation import validate_url

PAGE_TYPES = HTML_TYPES | {PLAIN_TEXT}
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9"
# URLs started ahead of the slowest one: enough to keep every host slot busy, few enough that
# pages waiting for extraction do not pile up in memory.
_WINDOW_PER_SLOT = 4
_DRAIN_LIMIT = 64 * 1024
# RFC 9309 (2.5): a crawler must parse at least the first 500 KiB of a robots.txt; the rest of a
# larger one is not read.
ROBOTS_MAX_BYTES = 500 * 1024
# RFC 9309 (2.3.1.2): at least five consecutive redirects are followed for robots.txt, whatever
# the crawl's own redirect limit.
ROBOTS_MAX_REDIRECTS = 5


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
            headers={"User-Agent": config.user_agent, "Accept": _ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
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
    """Ends one URL as `failed`; the message is the outcome's reason. `unreachable`: the server
    could not be reached or kept failing (5xx, 429, timeouts), rather than answered no."""

    def __init__(self, reason: str, *, unreachable: bool = False) -> None:
        super().__init__(reason)
        self.unreachable = unreachable


@dataclass(frozen=True)
class _Cap:
    """How much of a body is read: past `max_bytes` it is refused, or with `cut` kept to there."""

    max_bytes: int
    cut: bool = False


@dataclass(frozen=True)
class _RobotsDown:
    """A robots.txt that answered 5xx or could not be reached: its host is not crawled this run."""

    reason: str


_Robots = Protego | _RobotsDown | None


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
    truncated: bool = False
    """The body went on past its cap, and was cut there."""


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
        self._robots: dict[str, _Robots] = {}
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

    async def fetch_body(self, url: str, *, max_bytes: int) -> FetchedBody:
        """The body a 200 answers at `url` with (a sitemap), through every guard a page request
        passes, read to `max_bytes` (decoded) and cut there; or why there is none."""
        progress = _Progress(final_url=url)
        try:
            response = await self._fetch(
                url, previous=None, progress=progress, media_types=None, cap=_Cap(max_bytes, cut=True)
            )
        except _Failed as exc:
            return FetchedBody(error=str(exc))
        if response.status != 200:
            return FetchedBody(error=f"HTTP {response.status}")
        return FetchedBody(body=response.body, truncated=response.truncated)

    async def _fetch(
        self,
        url: str,
        *,
        previous: PreviousFetch | None,
        progress: _Progress,
        media_types: frozenset[str] | None,
        cap: _Cap | None = None,
        robots_txt: bool = False,
    ) -> _Response:
        """The final response for `url`, following redirects ourselves so every hop is checked.

        A `robots_txt` fetch is not itself subject to robots.txt, and follows ROBOTS_MAX_REDIRECTS
        redirects wherever they lead (the crawl's scope is for pages), as RFC 9309 asks.
        """
        current = _checked_url(url)
        progress.previous = previous
        max_redirects = ROBOTS_MAX_REDIRECTS if robots_txt else self._config.max_redirects
        for _ in range(max_redirects + 1):
            progress.final_url = current
            target = httpx.URL(current)  # parsed once per hop: host slot, robots origin and request
            host = _host(target)
            try:
                async with asyncio.timeout(self._config.connect_timeout):
                    await self._guard.addresses(host)
            except AddressError as exc:
                raise _Failed(str(exc)) from None
            except TimeoutError:
                raise _Failed(
                    f"resolving {host!r} timed out after {self._config.connect_timeout:g} s", unreachable=True
                ) from None
            if not robots_txt and self._config.obey_robots:
                await self._check_robots(current, target)
            response = await self._request(
                target,
                host=host,
                previous=progress.previous,
                progress=progress,
                media_types=media_types,
                cap=cap or _Cap(self._config.max_body_bytes),
            )
            if response.status not in REDIRECT_STATUSES:
                return response
            location = response.headers.get("location")
            if not location:
                raise _Failed(f"HTTP {response.status} redirect without a Location header")
            current = _checked_url(urljoin(current, location))
            if not robots_txt and not self._source.allows(current):
                raise _Failed(f"redirected out of the crawl's scope, to {current}; not followed")
            # A site crawl stores the page under the redirect's target: the next hop is conditional
            # on what the last crawl stored there.
            if progress.previous is None and (key := self._source.stored_key(current)) is not None:
                progress.previous = self._previous.get(key)
        raise _Failed(f"too many redirects (more than {max_redirects})")

    async def _request(
        self,
        url: httpx.URL,
        *,
        host: str,
        previous: PreviousFetch | None,
        progress: _Progress,
        media_types: frozenset[str] | None,
        cap: _Cap,
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
                response = await self._send(
                    url, host=host, headers=headers, media_types=media_types, progress=progress, cap=cap
                )
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
                raise _Failed(
                    reason if attempt == 1 else f"{reason} (gave up after {attempt} attempts)", unreachable=True
                )
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
        cap: _Cap,
    ) -> _Response:
        """One attempt. A 2xx body is read (checked for type and size) before the slots are freed.

        The body is read raw and decoded here, piece by piece, so its cap bounds the decoded bytes
        held, whatever the Content-Encoding: a gzip bomb costs the cap and one piece, no more.
        """
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
            if not cap.cut and declared.isdigit() and int(declared) > cap.max_bytes:
                raise _Failed(f"body larger than {cap.max_bytes} bytes ({declared} declared)")
            try:
                decoder = BodyDecoder(response.headers.get("content-encoding"))
                body = _Body(cap)
                async for chunk in response.aiter_raw():
                    if not body.add(decoder.feed(chunk)):
                        break
                else:
                    body.add(decoder.finish())
            except DecodingError as exc:
                raise _Failed(str(exc)) from None
            return _Response(
                status=response.status_code,
                headers=response.headers,
                media_type=media_type,
                charset=response.charset_encoding,
                body=bytes(body.data),
                raw_hash=body.digest.hexdigest(),
                truncated=body.truncated,
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
        return list(rules.sitemaps) if isinstance(rules, Protego) else []

    async def _check_robots(self, url: str, parts: httpx.URL) -> None:
        """Raise _Failed when the origin's robots.txt disallows `url`, or could not be had."""
        rules = await self._robots_of(parts)
        if isinstance(rules, _RobotsDown):
            raise _Failed(rules.reason)
        if rules is not None and not rules.can_fetch(url, self._config.user_agent):
            raise _Failed("disallowed by robots.txt")

    async def _robots_of(self, parts: httpx.URL) -> _Robots:
        origin = _origin(parts)
        if origin not in self._robots:
            # One robots.txt request per origin even when many of its URLs start together.
            async with self._robots_locks.setdefault(origin, asyncio.Lock()):
                if origin not in self._robots:
                    rules = self._robots[origin] = await self._load_robots(origin)
                    delay = rules.crawl_delay(self._config.user_agent) if isinstance(rules, Protego) else None
                    if delay:
                        self._crawl_delays[origin] = min(float(delay), self._config.max_crawl_delay)
        return self._robots[origin]

    async def _load_robots(self, origin: str) -> _Robots:
        """The origin's robots.txt rules, as RFC 9309 reads them.

        Its first ROBOTS_MAX_BYTES are parsed, however long it is. None (allow all) when it is
        unavailable: a 4xx, more than ROBOTS_MAX_REDIRECTS redirects (2.3.1.2 lets a crawler take
        that as unavailable), a redirect the guards refuse. A 5xx, a 429 (Google's reading: a
        server asking to slow down has not said its pages are open), a timeout or a connection
        error, each after the usual retries, make it unreachable: the origin is then completely
        disallowed for this crawl (2.3.1.4), each of its URLs failing with the reason.
        """
        robots_url = f"{origin}/robots.txt"
        try:
            response = await self._fetch(
                robots_url,
                previous=None,
                progress=_Progress(robots_url),
                media_types=None,
                cap=_Cap(ROBOTS_MAX_BYTES, cut=True),
                robots_txt=True,
            )
        except _Failed as exc:
            if not exc.unreachable:
                return None
            why = f"answered {exc}" if str(exc).startswith("HTTP ") else f"could not be reached: {exc}"
            return _RobotsDown(
                f"robots.txt {why}; the host is not crawled this run (RFC 9309: assume complete disallow), "
                "the next crawl tries again"
            )
        if not 200 <= response.status < 300:
            return None
        return Protego.parse(response.body[:ROBOTS_MAX_BYTES].decode("utf-8", errors="replace"))


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


class _Body:
    """A body as its decoded pieces come, hashed, and held to its cap."""

    def __init__(self, cap: _Cap) -> None:
        self.cap = cap
        self.data = bytearray()
        self.digest = hashlib.sha256()
        self.truncated = False

    def add(self, pieces: Iterable[bytes]) -> bool:
        """Take pieces until the cap is passed; False once it was (with `cut`: read no more)."""
        for piece in pieces:
            room = self.cap.max_bytes - len(self.data)
            if len(piece) > room:
                if not self.cap.cut:
                    raise _Failed(f"body larger than {self.cap.max_bytes} bytes")
                piece, self.truncated = piece[:room], True
            self.data += piece
            self.digest.update(piece)
            if self.truncated:
                return False
        return True


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
