"""What happened, as delivery rows: one per subscribed endpoint, queued in the caller's transaction.

Each delivery is keyed by what made it (`dedupe_key`: the run and pipeline, the crawl, the ledger
entry), once per endpoint, so whoever sees the same thing twice (a sensor re-evaluating a run, a
backfill re-recording a crawl's changes) queues it once. The sender posts what is queued.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime

import pydantic
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import dialect_insert
from pipelines_dagster.app_db.models import (
    DeliveryStatus,
    NotificationDelivery,
    NotificationEndpoint,
    PageChange,
    PageChangeStatus,
)
from pipelines_dagster.core.ledger.billing import Charged
from pipelines_dagster.notifications.payloads import (
    MAX_LISTED_CHANGES,
    RUN_EVENTS,
    CreditsLowData,
    NotificationEvent,
    PageChangeItem,
    PagesChangedData,
    RunEventData,
    body,
)

DataFor = Callable[[NotificationEndpoint], pydantic.BaseModel]


def new_message_id() -> str:
    """A message's webhook-id: the same on every attempt and redrive, so receivers can dedupe."""
    return "msg_" + secrets.token_urlsafe(18)


def subscribed(
    session: Session, *, workspace_id: int, event_type: str, pipeline_id: int | None = None
) -> list[NotificationEndpoint]:
    """The workspace's enabled endpoints that take `event_type` (for `pipeline_id`, when they name pipelines)."""
    endpoints = session.scalars(
        sa.select(NotificationEndpoint).where(
            NotificationEndpoint.workspace_id == workspace_id, NotificationEndpoint.enabled.is_(True)
        )
    )
    return [
        endpoint
        for endpoint in endpoints
        if event_type in endpoint.event_types
        and (pipeline_id is None or endpoint.pipeline_ids is None or pipeline_id in endpoint.pipeline_ids)
    ]


def queue(
    session: Session,
    endpoints: list[NotificationEndpoint],
    *,
    event_type: str,
    dedupe_key: str,
    data: pydantic.BaseModel | DataFor,
    now: datetime | None = None,
) -> list[int]:
    """Queue a message to each of `endpoints` (`data` may differ by endpoint); the new deliveries' ids."""
    moment = now or datetime.now(UTC)
    payload_for: Callable[[NotificationEndpoint], bytes]
    if isinstance(data, pydantic.BaseModel):
        shared = body(event_type, data, timestamp=moment)
        payload_for = lambda endpoint: shared  # noqa: E731
    else:
        payload_for = lambda endpoint: body(event_type, data(endpoint), timestamp=moment)  # noqa: E731
    queued = []
    for endpoint in endpoints:
        payload = payload_for(endpoint)
        delivery_id = session.scalar(
            dialect_insert(session, NotificationDelivery)
            .values(
                workspace_id=endpoint.workspace_id,
                endpoint_id=endpoint.id,
                event_type=event_type,
                message_id=new_message_id(),
                dedupe_key=dedupe_key,
                payload=payload,
                status=DeliveryStatus.PENDING.value,
                attempts=0,
                next_attempt_at=moment,
                created_at=moment,
            )
            .on_conflict_do_nothing(index_elements=["endpoint_id", "dedupe_key"])
            .returning(NotificationDelivery.id)
        )
        if delivery_id is not None:
            queued.append(delivery_id)
    return queued


def queue_run_ended(session: Session, data: RunEventData, *, now: datetime | None = None) -> list[int]:
    """run.succeeded, run.failed or run.canceled for one pipeline of a run that ended."""
    event = RUN_EVENTS[data.status]
    endpoints = subscribed(session, workspace_id=data.workspace_id, event_type=event, pipeline_id=data.pipeline_id)
    return queue(
        session, endpoints, event_type=event, dedupe_key=f"{event}:{data.run_id}:{data.pipeline_id}", data=data, now=now
    )


def queue_pages_changed(
    session: Session,
    *,
    workspace_id: int,
    pipeline_id: int,
    run_id: str,
    api_url: str | None,
    now: datetime | None = None,
) -> list[int]:
    """pages.changed for the changes recorded for a crawl (`run_id`), when it has any: call it in
    the transaction that records them."""
    event = NotificationEvent.PAGES_CHANGED
    endpoints = subscribed(session, workspace_id=workspace_id, event_type=event, pipeline_id=pipeline_id)
    if not endpoints:
        return []
    session.flush()
    of_crawl = (PageChange.pipeline_id == pipeline_id, PageChange.run_id == run_id)
    counts = dict(
        session.execute(
            sa.select(PageChange.status, sa.func.count()).where(*of_crawl).group_by(PageChange.status)
        ).all()
    )
    if not counts:
        return []
    rows = session.execute(
        sa.select(PageChange.id, PageChange.url, PageChange.status)
        .where(*of_crawl)
        .order_by(PageChange.id)
        .limit(MAX_LISTED_CHANGES + 1)
    ).all()
    changes_url = (
        f"{api_url.rstrip('/')}/workspaces/{workspace_id}/pipelines/{pipeline_id}/changes" if api_url else None
    )
    data = PagesChangedData(
        workspace_id=workspace_id,
        pipeline_id=pipeline_id,
        run_id=run_id,
        new=counts.get("new", 0),
        changed=counts.get("changed", 0),
        removed=counts.get("removed", 0),
        changes=[
            PageChangeItem(
                url=url,
                status=PageChangeStatus(status),
                change_id=change_id,
                diff_url=f"{changes_url}/{change_id}" if changes_url and status == "changed" else None,
            )
            for change_id, url, status in rows[:MAX_LISTED_CHANGES]
        ],
        truncated=len(rows) > MAX_LISTED_CHANGES,
        changes_url=changes_url,
    )
    return queue(session, endpoints, event_type=event, dedupe_key=f"{event}:{pipeline_id}:{run_id}", data=data, now=now)


def queue_credits_low(
    session: Session,
    *,
    workspace_id: int,
    balance_before: int,
    balance_after: int,
    ledger_entry_id: int,
    pipeline_id: int | None = None,
    run_id: str | None = None,
    now: datetime | None = None,
) -> list[int]:
    """credits.low to each endpoint whose threshold this charge crossed (from at least it to under
    it): once per crossing, however long the balance then stays low. Call it in the charge's transaction."""
    event = NotificationEvent.CREDITS_LOW
    crossed = [
        endpoint
        for endpoint in subscribed(session, workspace_id=workspace_id, event_type=event)
        if endpoint.credits_below_micros is not None and balance_before >= endpoint.credits_below_micros > balance_after
    ]

    def data(endpoint: NotificationEndpoint) -> CreditsLowData:
        assert endpoint.credits_below_micros is not None  # only such endpoints crossed
        return CreditsLowData(
            workspace_id=workspace_id,
            balance_micros=balance_after,
            threshold_micros=endpoint.credits_below_micros,
            charged_micros=balance_before - balance_after,
            pipeline_id=pipeline_id,
            run_id=run_id,
        )

    return queue(session, crossed, event_type=event, dedupe_key=f"{event}:{ledger_entry_id}", data=data, now=now)


def credits_low_hook(session: Session, charged: Charged) -> list[int]:
    """The billing charge hook (`Billing(on_charged=...)`): credits.low for the thresholds a charge crossed."""
    return queue_credits_low(
        session,
        workspace_id=charged.workspace_id,
        balance_before=charged.balance_before,
        balance_after=charged.balance_after,
        ledger_entry_id=charged.ledger_entry_id,
        pipeline_id=charged.usage.get("pipeline_id"),
        run_id=charged.usage.get("run_id"),
    )
