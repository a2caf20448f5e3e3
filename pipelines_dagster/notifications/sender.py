"""Posts queued notifications: signed, with retries on a schedule of about a day, logged attempt by attempt.

A pass claims the due deliveries a batch at a time (each leased to it, `FOR UPDATE SKIP LOCKED` on
PostgreSQL so senders share the work), posts them concurrently through the destination guard,
and records each result as results come in. Only a 2xx within `timeout` seconds is a success; a
redirect is not followed. A sender that dies mid-batch loses nothing: what it claimed but did not
record is claimed again when its lease runs out and sent again under the same webhook-id, the
at-least-once delivery Standard Webhooks receivers dedupe.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import (
    DeliveryStatus,
    NotificationAttempt,
    NotificationDelivery,
    NotificationEndpoint,
)
from pipelines_dagster.core.security.signing import live_secrets, signature_header
from pipelines_dagster.core.security.ssrf import AddressError
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.endpoints import disable
from pipelines_dagster.notifications.payloads import TEST_EVENT

# Waits before the 2nd, 3rd ... attempt (Svix's schedule): 8 attempts over 27.6 hours, then failed.
RETRY_DELAYS = (
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
    timedelta(hours=10),
)
MAX_ATTEMPTS = len(RETRY_DELAYS) + 1
# An endpoint that has failed every attempt for this long is disabled, with the reason.
DISABLE_AFTER = timedelta(days=5)
REQUEST_TIMEOUT_SECONDS = 10.0
# Longer than a batch can take (batch_size / concurrency rounds of one timeout each).
LEASE = timedelta(minutes=5)
# Results are recorded this many at a time, so a sender killed mid-batch resends little.
RECORD_EVERY = 50
_RESPONSE_BYTES = 64 * 1024
_ERROR_CHARS = 500
USER_AGENT = "pipelines-dagster-notifications/0.1"


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class _Claimed:
    delivery_id: int
    endpoint_id: int
    url: str
    message_id: str
    payload: bytes
    attempts: int
    secrets: list[dict[str, Any]]
    leased_until: datetime
    test: bool
    """A `notification test` message: sent once, at once, and no sign of the endpoint's health."""


@dataclass(frozen=True, kw_only=True)
class AttemptResult:
    delivery_id: int
    endpoint_id: int
    attempted_at: datetime
    status_code: int | None
    error: str | None
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return self.error is None


@dataclass(kw_only=True)
class SendReport:
    """What a pass did."""

    sent: int = 0
    succeeded: int = 0
    retrying: int = 0
    failed: int = 0
    """Out of attempts."""
    disabled_endpoints: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        text = f"sent {self.sent}: {self.succeeded} delivered, {self.retrying} to retry, {self.failed} failed for good"
        if self.disabled_endpoints:
            text += f"; disabled endpoints {self.disabled_endpoints} (failing for {DISABLE_AFTER.days} days)"
        return text


class Sender:
    """Sends the app database's due notification deliveries."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        guard: DestinationGuard,
        *,
        batch_size: int = 500,
        concurrency: int = 64,
        per_endpoint: int = 8,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._sessions = sessions
        self._guard = guard
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.per_endpoint = per_endpoint
        self.timeout = timeout
        self._clock = clock

    def send_due(self, *, max_seconds: float | None = None) -> SendReport:
        """Send what is due, batch after batch, until nothing is or `max_seconds` have passed."""
        report = SendReport()
        started = time.monotonic()
        while claimed := self._claim():
            asyncio.run(self._send(claimed, report))
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                break
        return report

    def send_now(self, delivery_ids: Sequence[int]) -> list[AttemptResult]:
        """Send these pending deliveries at once, due or not (a test message); their results."""
        claimed = self._claim(ids=delivery_ids)
        if not claimed:
            return []
        return asyncio.run(self._send(claimed, SendReport()))

    def _claim(self, *, ids: Sequence[int] | None = None) -> list[_Claimed]:
        now = self._clock()
        lease = now + LEASE
        with transaction(self._sessions) as session:
            query = sa.select(NotificationDelivery.id).where(
                NotificationDelivery.status == DeliveryStatus.PENDING.value,
                sa.or_(NotificationDelivery.leased_until.is_(None), NotificationDelivery.leased_until <= now),
            )
            if ids is None:
                # What is due, to endpoints still enabled; test messages are sent by send_now alone.
                query = (
                    query.join(NotificationEndpoint, NotificationEndpoint.id == NotificationDelivery.endpoint_id)
                    .where(
                        NotificationDelivery.next_attempt_at <= now,
                        NotificationDelivery.event_type != TEST_EVENT,
                        NotificationEndpoint.enabled.is_(True),
                    )
                    .order_by(NotificationDelivery.next_attempt_at, NotificationDelivery.id)
                    .limit(self.batch_size)
                )
            else:
                query = query.where(NotificationDelivery.id.in_(ids))
            picked = list(session.scalars(query.with_for_update(skip_locked=True, of=NotificationDelivery)))
            if not picked:
                return []
            session.execute(
                sa.update(NotificationDelivery)
                .where(NotificationDelivery.id.in_(picked))
                .values(leased_until=lease)
                .execution_options(synchronize_session=False)
            )
            rows = session.execute(
                sa.select(
                    NotificationDelivery.id,
                    NotificationDelivery.endpoint_id,
                    NotificationEndpoint.url,
                    NotificationDelivery.message_id,
                    NotificationDelivery.payload,
                    NotificationDelivery.attempts,
                    NotificationEndpoint.signing_secrets,
                    NotificationDelivery.event_type,
                )
                .join(NotificationEndpoint, NotificationEndpoint.id == NotificationDelivery.endpoint_id)
                .where(NotificationDelivery.id.in_(picked))
                .order_by(NotificationDelivery.id)
            ).all()
        return [
            _Claimed(
                delivery_id=delivery_id,
                endpoint_id=endpoint_id,
                url=url,
                message_id=message_id,
                payload=payload,
                attempts=attempts,
                secrets=secrets,
                leased_until=lease,
                test=event_type == TEST_EVENT,
            )
            for delivery_id, endpoint_id, url, message_id, payload, attempts, secrets, event_type in rows
        ]

    async def _send(self, claimed: list[_Claimed], report: SendReport) -> list[AttemptResult]:
        everyone = asyncio.Semaphore(self.concurrency)
        # Taken before a place among everyone's, so a slow endpoint holds at most its own share.
        per_endpoint: dict[int, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(self.per_endpoint))
        by_id = {delivery.delivery_id: delivery for delivery in claimed}
        results: list[AttemptResult] = []
        pending: list[AttemptResult] = []
        async with AsyncExitStack() as stack:
            # A client (a connection pool) per endpoint, of per_endpoint connections: httpcore's pool
            # looks over all its connections for each request it places, so one pool of `concurrency`
            # connections spent more CPU on that than on the posts themselves.
            clients: dict[int, httpx.AsyncClient] = {}
            for endpoint_id in {delivery.endpoint_id for delivery in claimed}:
                limits = httpx.Limits(max_connections=self.per_endpoint, max_keepalive_connections=self.per_endpoint)
                clients[endpoint_id] = await stack.enter_async_context(
                    httpx.AsyncClient(
                        transport=self._guard.transport(limits=limits),
                        headers={"User-Agent": USER_AGENT, "Content-Type": "application/json"},
                        follow_redirects=False,
                    )
                )

            async def post(delivery: _Claimed) -> AttemptResult:
                async with per_endpoint[delivery.endpoint_id], everyone:
                    return await self._post(clients[delivery.endpoint_id], delivery)

            for done in asyncio.as_completed([post(delivery) for delivery in claimed]):
                pending.append(await done)
                if len(pending) >= RECORD_EVERY:
                    self._record(pending, by_id, report)
                    results += pending
                    pending = []
        if pending:
            self._record(pending, by_id, report)
            results += pending
        return results

    async def _post(self, client: httpx.AsyncClient, delivery: _Claimed) -> AttemptResult:
        moment = self._clock()
        started = time.monotonic()
        status_code: int | None = None
        error: str | None = None
        headers = {
            "webhook-id": delivery.message_id,
            "webhook-timestamp": str(int(moment.timestamp())),
            "webhook-signature": signature_header(
                delivery.payload,
                live_secrets(delivery.secrets, moment),
                message_id=delivery.message_id,
                timestamp=int(moment.timestamp()),
            ),
        }
        try:
            async with (
                asyncio.timeout(self.timeout),
                client.stream("POST", delivery.url, content=delivery.payload, headers=headers) as response,
            ):
                status_code = response.status_code
                await _read_some(response)
            if response.is_redirect:
                error = (
                    f"HTTP {status_code} redirect to {response.headers.get('location')!r} not followed; "
                    "give the endpoint the URL that answers"
                )
            elif not response.is_success:
                error = f"HTTP {status_code}"
        except AddressError as exc:
            error = f"destination refused: {exc}"
        except (TimeoutError, httpx.TimeoutException):
            error = f"no answer within {self.timeout:g} s"
        except httpx.HTTPError as exc:
            error = f"request failed: {exc or type(exc).__name__}"
        return AttemptResult(
            delivery_id=delivery.delivery_id,
            endpoint_id=delivery.endpoint_id,
            attempted_at=moment,
            status_code=status_code,
            error=error[:_ERROR_CHARS] if error else None,
            duration_ms=round((time.monotonic() - started) * 1000),
        )

    def _record(self, results: list[AttemptResult], claimed: dict[int, _Claimed], report: SendReport) -> None:
        """Log the attempts and move each delivery on: delivered, due again later, or failed for good.
        A delivery whose lease another sender has taken since is left to that sender."""
        now = self._clock()
        updates = []
        for result in results:
            delivery = claimed[result.delivery_id]
            attempts = delivery.attempts + 1
            state: dict[str, Any] = {
                "b_id": result.delivery_id,
                "b_lease": delivery.leased_until,
                "attempts": attempts,
                "last_status_code": result.status_code,
                "last_error": result.error,
                "status": DeliveryStatus.PENDING.value,
                "next_attempt_at": None,
                "delivered_at": None,
            }
            if result.succeeded:
                state |= {"status": DeliveryStatus.SUCCEEDED.value, "delivered_at": result.attempted_at}
                report.succeeded += 1
            elif attempts >= MAX_ATTEMPTS or delivery.test:
                state["status"] = DeliveryStatus.FAILED.value
                report.failed += 1
            else:
                state["next_attempt_at"] = now + RETRY_DELAYS[attempts - 1]
                report.retrying += 1
            updates.append(state)
        report.sent += len(results)
        table = cast(sa.Table, NotificationDelivery.__table__)
        with transaction(self._sessions) as session:
            session.execute(
                sa.insert(NotificationAttempt),
                [
                    {
                        "delivery_id": result.delivery_id,
                        "attempted_at": result.attempted_at,
                        "status_code": result.status_code,
                        "error": result.error,
                        "duration_ms": result.duration_ms,
                        "succeeded": result.succeeded,
                    }
                    for result in results
                ],
            )
            session.execute(
                sa.update(table)
                .where(table.c.id == sa.bindparam("b_id"), table.c.leased_until == sa.bindparam("b_lease"))
                .values(
                    leased_until=None,
                    attempts=sa.bindparam("attempts"),
                    last_status_code=sa.bindparam("last_status_code"),
                    last_error=sa.bindparam("last_error"),
                    status=sa.bindparam("status"),
                    next_attempt_at=sa.bindparam("next_attempt_at"),
                    delivered_at=sa.bindparam("delivered_at"),
                ),
                updates,
            )
            health = [result for result in results if not claimed[result.delivery_id].test]
            report.disabled_endpoints += self._judge_endpoints(session, health, now)

    def _judge_endpoints(self, session: Session, results: list[AttemptResult], now: datetime) -> list[int]:
        """Clear the failure streak of endpoints that took a delivery; start or extend it for those that
        took none; disable those failing for DISABLE_AFTER. The ids disabled."""
        took: set[int] = set()
        failed_at: dict[int, datetime] = {}
        for result in results:
            if result.succeeded:
                took.add(result.endpoint_id)
            else:
                failed_at[result.endpoint_id] = min(result.attempted_at, failed_at.get(result.endpoint_id, now))
        endpoints = NotificationEndpoint
        if took:
            session.execute(sa.update(endpoints).where(endpoints.id.in_(took)).values(failing_since=None))
        disabled = []
        for endpoint_id, first in failed_at.items():
            if endpoint_id in took:
                continue
            session.execute(
                sa.update(endpoints)
                .where(endpoints.id == endpoint_id, endpoints.failing_since.is_(None))
                .values(failing_since=first)
            )
            since = session.scalar(
                sa.select(endpoints.failing_since).where(endpoints.id == endpoint_id, endpoints.enabled.is_(True))
            )
            if since is not None and since <= now - DISABLE_AFTER:
                last = next(result.error for result in reversed(results) if result.endpoint_id == endpoint_id)
                disable(
                    session,
                    endpoint_id,
                    reason=f"every delivery failed since {since:%Y-%m-%d %H:%M} UTC (last: {last})",
                )
                disabled.append(endpoint_id)
        return disabled


async def _read_some(response: httpx.Response) -> None:
    """Read a little of the answer, so a well-behaved keep-alive connection can serve the next post;
    a large one is left unread (the connection is closed instead)."""
    seen = 0
    async for chunk in response.aiter_raw():
        seen += len(chunk)
        if seen > _RESPONSE_BYTES:
            return
