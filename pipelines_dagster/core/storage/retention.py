"""Retention: old crawl blobs, webhook deliveries and notification deliveries are deleted, each pipeline's
latest crawl never; so are the leftovers of blob writes whose process was killed."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import DeliveryStatus, NotificationDelivery, WebhookDelivery
from pipelines_dagster.core.storage.blob import BlobStore
from pipelines_dagster.core.validation import MAX_RUNTIME_SECONDS

RUNS_PREFIX = "pipeline_runs/"
# Blobs are written by runs, and no run outlives the longest max runtime a pipeline may be given (a week;
# deploy/dagster.yaml's default is 2 h): a write begun a day before that belongs to a dead process,
# never to one still writing.
ABANDONED_WRITE_AGE = timedelta(seconds=MAX_RUNTIME_SECONDS) + timedelta(days=1)


@dataclass(frozen=True, kw_only=True)
class RetentionReport:
    blobs_deleted: list[str]
    blobs_kept: int
    deliveries_deleted: int
    notifications_deleted: int = 0
    abandoned_writes_removed: int = 0


def cutoff(now: datetime, days: int) -> datetime:
    if days < 1:
        raise ValueError(f"retention must be at least 1 day, got {days}")
    return now - timedelta(days=days)


def prune_crawl_blobs(store: BlobStore, *, older_than: datetime, keep: Collection[str] = ()) -> tuple[list[str], int]:
    """Delete run results last written before `older_than`: (deleted keys, kept count).

    Each pipeline's newest blob survives whatever its age, and so does every key in `keep`
    (the crawls the event log names as latest, which a KB rebuild reads).
    """
    blobs = [(blob, pipeline) for blob in store.list(RUNS_PREFIX) if (pipeline := _pipeline_of(blob.key))]
    newest: dict[str, datetime] = {}
    for blob, pipeline in blobs:
        newest[pipeline] = max(newest.get(pipeline, blob.last_modified), blob.last_modified)
    # Ties (S3 stamps whole seconds) all count as newest: keeping one too many is harmless.
    deleted = [
        blob.key
        for blob, pipeline in blobs
        if blob.last_modified < older_than and blob.last_modified < newest[pipeline] and blob.key not in keep
    ]
    for key in deleted:
        store.delete(key)
    return deleted, len(blobs) - len(deleted)


def _pipeline_of(key: str) -> str | None:
    """'{workspace}/{pipeline}' of a `run_result_key`, None for any other object under the prefix."""
    parts = key.split("/")
    if len(parts) != 5 or parts[-1] != "result.jsonl":
        return None
    return f"{parts[1]}/{parts[2]}"


def prune_webhook_deliveries(sessions: sessionmaker[Session], *, older_than: datetime) -> int:
    """Delete deliveries received before `older_than`.

    With a cutoff of a day or more this never removes one the webhook sensor has not read yet
    (it reads within seconds), and dropping a dedupe key reopens no replay: a standard-mode
    delivery older than `MAX_DELIVERY_AGE_SECONDS` is refused by its signed timestamp, and a
    github-mode body by its digest (`WebhookBodyDigest`), which is kept.
    """
    return _delete(sessions, sa.delete(WebhookDelivery).where(WebhookDelivery.received_at < older_than))


def prune_notification_deliveries(sessions: sessionmaker[Session], *, older_than: datetime) -> int:
    """Delete notification deliveries queued before `older_than` that are done (delivered, or failed
    for good), with their attempt logs; a pending one is kept whatever its age."""
    done = NotificationDelivery.status.in_([DeliveryStatus.SUCCEEDED.value, DeliveryStatus.FAILED.value])
    return _delete(sessions, sa.delete(NotificationDelivery).where(done, NotificationDelivery.created_at < older_than))


def _delete(sessions: sessionmaker[Session], statement: sa.Delete) -> int:
    with transaction(sessions) as session:
        result = session.execute(statement)
        # A bulk DELETE's result is a CursorResult, the one kind that counts rows.
        assert isinstance(result, sa.CursorResult)
        return result.rowcount


def apply_retention(
    store: BlobStore, sessions: sessionmaker[Session], *, now: datetime, days: int, keep: Collection[str] = ()
) -> RetentionReport:
    older_than = cutoff(now, days)
    deleted, kept = prune_crawl_blobs(store, older_than=older_than, keep=keep)
    return RetentionReport(
        blobs_deleted=deleted,
        blobs_kept=kept,
        deliveries_deleted=prune_webhook_deliveries(sessions, older_than=older_than),
        notifications_deleted=prune_notification_deliveries(sessions, older_than=older_than),
        abandoned_writes_removed=store.remove_abandoned_writes(older_than=now - ABANDONED_WRITE_AGE),
    )
