"""Fetching one URL of a crawl, politely and safely: the address guard and robots.txt on every hop,
redirects followed by hand so each is checked, retries with backoff, host slots and Crawl-delay, and
a body read to its cap before its text is extracted; and a rendered page's subresources, through the
same guards."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

import httpx

from pipelines_dagster.core.crawl.body import Body, BodyCap, BodyDecoder, DecodingError, drain
from pipelines_dagster.core.crawl.extract.extracted import Extracted, page_kind
from pipelines_dagster.core.crawl.headers import conditional_headers, retry_after_seconds
from pipelines_dagster.core.crawl.host_budget import HostBudget, HostBudgetError
from pipelines_dagster.core.crawl.page_types import page_cap, page_type
from pipelines_dagster.core.crawl.requested import PAGE, ROBOTS_TXT, SUBRESOURCE, Requested
from pipelines_dagster.core.crawl.robots import ROBOTS_MAX_BYTES, RobotsRules
from pipelines_dagster.core.crawl.slots import HostSlots
from pipelines_dagster.core.crawl.throttle import RequestWaits
from pipelines_dagster.core.crawl.types import (
    CrawlerConfig,
    CrawlOutcome,
    CrawlStatus,
    FetchedBody,
    FetchFailed,
    FetchProgress,
    PreviousFetch,
    Resource,
    UrlSource,
)
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.security.ssrf import AddressError, AddressGuard
from pipelines_dagster.core.validation import validate_url

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Document bodies (50 MiB each at most) a crawl holds at once, from their read to their outcome: a window of 64
# URLs of documents would hold over 3 GiB. More than a machine's extraction workers, so they stay busy.
DOCUMENTS_AT_ONCE = 4
# Headers that describe the body as it came over the wire; a subresource's body is handed on decoded.
_WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


@dataclass(frozen=True)
class FetchResponse:
    status: int
    headers: httpx.Headers
    media_type: str = ""
    charset: str | None = None
    body: bytes = b""
    raw_hash: str | None = None
    truncated: bool = False
    """The body went on past its cap, and was cut there."""


class Fetcher:
    """One crawl's fetching and what its URLs share: the HTTP client, the address guard, robots rules and
    host slots. `crawl_url` is a URL's whole fetch, one outcome; sources read sitemaps through it."""

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
        waits: RequestWaits | None = None,
        robots_waived: frozenset[str] = frozenset(),
    ) -> None:
        self._config = config
        # As _host writes them: an IPv6 address without its brackets.
        self._robots_waived = frozenset(host.strip("[]") for host in robots_waived)
        self._source = source
        self._previous = previous
        self._guard = guard
        self._client = client
        self._extract = extract
        self._robots = RobotsRules(
            self._fetch_robots, user_agent=config.user_agent, max_crawl_delay=config.max_crawl_delay
        )
        self._documents = asyncio.Semaphore(DOCUMENTS_AT_ONCE)
        self._hosts = HostSlots(
            per_host=config.per_host_concurrency,
            global_concurrency=config.global_concurrency,
            crawl_delays=self._robots.crawl_delays,
            host_budget=host_budget,
            waits=waits,
        )

    async def crawl_url(self, url: str, previous: PreviousFetch | None) -> CrawlOutcome:
        started = time.monotonic()
        fetched_at = datetime.now(UTC)
        progress = FetchProgress(final_url=url)

        def outcome(status: CrawlStatus, **fields: Any) -> CrawlOutcome:
            return CrawlOutcome(
                url=url,
                final_url=progress.final_url,
                status=status,
                fetched_at=fetched_at,
                elapsed=time.monotonic() - started,
                attempts=progress.attempts,
                http_status=progress.http_status,
                kind=progress.kind,
                **fields,
            )

        try:
            response = await self._fetch(url, previous=previous, progress=progress, as_page=True)
            previous = progress.previous
            etag = response.headers.get("etag")
            last_modified = response.headers.get("last-modified")
            if response.status == 304:
                if previous is None:
                    raise FetchFailed("HTTP 304 Not Modified to a request that was not conditional")
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
                rendered=extracted.rendered,
                render_seconds=extracted.render_seconds,
            )
        except FetchFailed as exc:
            return outcome("failed", error=str(exc))
        except Exception as exc:  # continue-on-fail: a bug met on one page must not end the crawl
            return outcome("failed", error=f"unexpected error: {exc!r}")
        finally:
            if progress.holds_document:
                self._documents.release()

    async def fetch_body(self, url: str, *, max_bytes: int) -> FetchedBody:
        """The body a 200 answers at `url` with (a sitemap), through every guard a page request
        passes, read to `max_bytes` (decoded) and cut there; or why there is none."""
        progress = FetchProgress(final_url=url)
        try:
            response = await self._fetch(
                url, previous=None, progress=progress, as_page=False, cap=BodyCap(max_bytes, cut=True)
            )
        except FetchFailed as exc:
            return FetchedBody(error=str(exc))
        if response.status != 200:
            return FetchedBody(error=f"HTTP {response.status}")
        return FetchedBody(body=response.body, truncated=response.truncated)

    async def fetch_resource(self, url: str) -> Resource | str:
        """What a page being rendered asks for (a script, a stylesheet, its JSON), through the address
        guard on every hop, the host slots and budget, its body capped at max_body_bytes; or why not.

        robots.txt rules the document, not what it loads: a page the crawl may fetch gets the
        resources it needs, as in a browser. Nor are they held to the crawl's scope, since a page's
        script may come from another site. A non-2xx answer other than a redirect is a refusal.
        """
        try:
            response = await self._fetch(
                url, previous=None, progress=FetchProgress(final_url=url), as_page=False, requested=SUBRESOURCE
            )
        except FetchFailed as exc:
            return str(exc)
        headers = {name: value for name, value in response.headers.items() if name.lower() not in _WIRE_HEADERS}
        return Resource(status=response.status, headers=headers, body=response.body)

    async def _fetch(
        self,
        url: str,
        *,
        previous: PreviousFetch | None,
        progress: FetchProgress,
        as_page: bool,
        cap: BodyCap | None = None,
        requested: Requested = PAGE,
    ) -> FetchResponse:
        """The final response for `url`, following redirects ourselves so every hop is checked. `as_page`: the
        body is a page's, read only for the types a crawl extracts and to their cap (`page_types`); else to
        `cap`, by default the page cap, whatever its type."""
        current = _checked_url(url)
        progress.previous = previous
        max_redirects = requested.max_redirects if requested.max_redirects is not None else self._config.max_redirects
        for _ in range(max_redirects + 1):
            progress.final_url = current
            target = httpx.URL(current)  # parsed once per hop: host slot, robots origin and request
            host = _host(target)
            try:
                async with asyncio.timeout(self._config.connect_timeout):
                    await self._guard.addresses(host)
            except AddressError as exc:
                raise FetchFailed(str(exc)) from None
            except TimeoutError:
                raise FetchFailed(
                    f"resolving {host!r} timed out after {self._config.connect_timeout:g} s", unreachable=True
                ) from None
            if requested.page and self._config.obey_robots and host not in self._robots_waived:
                await self._robots.check(current, target)
            response = await self._request(
                target,
                host=host,
                previous=progress.previous,
                progress=progress,
                as_page=as_page,
                cap=cap or BodyCap(self._config.max_body_bytes),
                requested=requested,
            )
            if response.status not in REDIRECT_STATUSES:
                return response
            location = response.headers.get("location")
            if not location:
                raise FetchFailed(f"HTTP {response.status} redirect without a Location header")
            current = _checked_url(urljoin(current, location))
            if not requested.page:
                continue
            if not self._source.allows(current):
                raise FetchFailed(f"redirected out of the crawl's scope, to {current}; not followed")
            # A site crawl stores the page under the redirect's target: the next hop is conditional
            # on what the last crawl stored there.
            if progress.previous is None and (key := self._source.stored_key(current)) is not None:
                progress.previous = self._previous.get(key)
        raise FetchFailed(f"too many redirects (more than {max_redirects})")

    async def _request(
        self,
        url: httpx.URL,
        *,
        host: str,
        previous: PreviousFetch | None,
        progress: FetchProgress,
        as_page: bool,
        cap: BodyCap,
        requested: Requested,
    ) -> FetchResponse:
        """One hop's response, retrying 429, 5xx, timeouts and connection errors with backoff."""
        config = self._config
        headers = conditional_headers(previous)
        if requested.accept is not None:
            headers["Accept"] = requested.accept
        max_attempts = requested.max_attempts or config.max_attempts
        attempt = 0
        while True:
            attempt += 1
            progress.attempts = attempt
            retry_after: float | None = None
            try:
                response = await self._send(
                    url, host=host, headers=headers, as_page=as_page, progress=progress, cap=cap
                )
            except (AddressError, HostBudgetError) as exc:
                raise FetchFailed(str(exc)) from None
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
                    raise FetchFailed(f"HTTP {response.status}")
            if attempt >= max_attempts:
                raise FetchFailed(
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
        as_page: bool,
        progress: FetchProgress,
        cap: BodyCap,
    ) -> FetchResponse:
        """One attempt. A 2xx body is read (checked for type and size) before the slots are freed.

        The body is read raw and decoded here, piece by piece, so its cap bounds the decoded bytes
        held, whatever the Content-Encoding: a gzip bomb costs the cap and one piece, no more.
        """
        config = self._config
        async with (
            self._hosts.request(url, host=host),
            asyncio.timeout(config.total_timeout) as budget,
            self._client.stream("GET", url, headers=headers) as response,
        ):
            progress.http_status = response.status_code
            if not response.is_success:
                await drain(response)
                return FetchResponse(status=response.status_code, headers=response.headers)
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if as_page:
                cap = page_cap(media_type, url=str(url), config=config)
                progress.kind = page_kind(media_type)
                if cap.document and not progress.holds_document:
                    await self._hold_document(progress, budget)
            declared = response.headers.get("content-length", "")
            if not cap.cut and declared.isdigit() and int(declared) > cap.max_bytes:
                raise FetchFailed(f"body larger than {cap.max_bytes} bytes ({declared} declared)")
            try:
                decoder = BodyDecoder(response.headers.get("content-encoding"))
                body = Body(cap)
                async for chunk in response.aiter_raw():
                    if not body.add(decoder.feed(chunk)):
                        break
                else:
                    body.add(decoder.finish())
            except DecodingError as exc:
                raise FetchFailed(str(exc)) from None
            data = bytes(body.data)
            if as_page:
                media_type = page_type(media_type, data, url=str(url))
                progress.kind = page_kind(media_type)
            return FetchResponse(
                status=response.status_code,
                headers=response.headers,
                media_type=media_type,
                charset=response.charset_encoding,
                body=data,
                raw_hash=body.digest.hexdigest(),
                truncated=body.truncated,
            )

    async def _hold_document(self, progress: FetchProgress, budget: asyncio.Timeout) -> None:
        """Take a document slot for the URL; the wait for one is not counted in the attempt's time budget."""
        deadline, waited = budget.when(), time.monotonic()
        budget.reschedule(None)
        await self._documents.acquire()
        progress.holds_document = True
        if deadline is not None:
            budget.reschedule(deadline + time.monotonic() - waited)

    async def robots_sitemaps(self, url: str) -> list[str]:
        """The sitemaps the robots.txt of `url`'s origin names (read once per crawl, as for its rules)."""
        return await self._robots.sitemaps(url)

    async def _fetch_robots(self, url: str) -> tuple[int, bytes]:
        response = await self._fetch(
            url,
            previous=None,
            progress=FetchProgress(url),
            as_page=False,
            cap=BodyCap(ROBOTS_MAX_BYTES, cut=True),
            requested=ROBOTS_TXT,
        )
        return response.status, response.body


def _checked_url(url: str) -> str:
    try:
        return validate_url(url)
    except InvalidInputError as exc:
        raise FetchFailed(exc.message) from None


def _host(url: httpx.URL) -> str:
    # The ASCII (IDNA) form, the one httpcore hands the network backend, so both share guard answers.
    return url.raw_host.decode("ascii")
