"""The page-change timeline: each crawl compared with the last good crawl of every page, and queries over it."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import pydantic
import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Document, PageChange, PageChangeStatus, PageState
from pipelines_dagster.core.crawl.health import CrawlHealth
from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.errors import NotFoundError
from pipelines_dagster.core.kb.index import DOCUMENT_TYPE, GONE_HTTP_STATUSES, chunks, content_hash

Observation = Literal["seen", "gone", "skipped"]

MAX_DIFF_BYTES = 64 * 1024
TRUNCATED_NOTE = "\n... diff truncated at {limit} bytes of {total}\n"
MAX_LIMIT = 100


def url_hash(url: str) -> str:
    """The key of a page's timeline state: its URL's sha256, of a fixed length however long the URL."""
    return hashlib.sha256(url.encode()).hexdigest()


def normalize(markdown: str) -> str:
    """Markdown with whitespace folded: runs of blanks become one space, blank lines vanish."""
    lines = (" ".join(line.split()) for line in markdown.splitlines())
    return "\n".join(line for line in lines if line)


def unified_diff(before: str, after: str, *, url: str, max_bytes: int = MAX_DIFF_BYTES) -> str:
    """A unified diff of two normalized pages, cut at a line boundary once it exceeds `max_bytes`."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"{url} (before)",
        tofile=f"{url} (after)",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    cut = encoded[:max_bytes].decode(errors="ignore").rsplit("\n", 1)[0]
    return cut + TRUNCATED_NOTE.format(limit=max_bytes, total=len(encoded))


@dataclass(kw_only=True)
class ChangeCounts:
    new: int = 0
    changed: int = 0
    same: int = 0
    removed: int = 0
    # Failed or empty this time (or 404/410 in an unhealthy crawl): the last good observation stands.
    skipped: int = 0
    # URLs whose state already reflects this crawl: a re-run over the same blob.
    already_recorded: int = 0
    changes: list[tuple[str, str]] = field(default_factory=list)


def _observation(record: CrawlRecord) -> Observation:
    if record.succeeded:
        return "seen"
    if record.http_status in GONE_HTTP_STATUSES:
        return "gone"
    return "skipped"


def record_changes(
    sessions: sessionmaker[Session],
    *,
    workspace_id: int,
    pipeline_id: int,
    run_id: str,
    records: Iterable[CrawlRecord],
    health: CrawlHealth,
    now: datetime | None = None,
    on_recorded: Callable[[Session], object] | None = None,
) -> ChangeCounts:
    """Compare a crawl's records with each page's last good observation and append the timeline rows.

    All in one transaction, and keyed by the crawl's run id, so a retry or backfill over the
    same crawl appends nothing twice. What the crawl's `health` allows is removed: pages that
    answered 404/410 and pages it did not cover after a complete crawl, only the former after an
    incomplete one (a site crawl stopped at max pages), none after an unhealthy one, which keeps
    every page it could not fetch at its last observation.

    Pages are compared a batch at a time, each batch's rows flushed and let go, and a page's stored
    text is read only when its hash changed: memory stays flat however many pages a crawl has.
    `on_recorded` is called with the session once the rows are written, in their transaction (the
    notifications of the changes are queued there, so they are recorded together or not at all).
    """
    moment = now or datetime.now(UTC)
    counts = ChangeCounts()
    with transaction(sessions) as session:
        timeline = _Timeline(session, workspace_id, pipeline_id, run_id, moment, counts, health)
        seen: set[str] = set()
        for batch in chunks(records, BATCH_SIZE):
            fresh: dict[str, CrawlRecord] = {}
            for record in batch:  # a URL the crawl holds twice counts once, as first seen
                key = url_hash(record.url)
                if key not in seen:
                    seen.add(key)
                    fresh[key] = record
            states = _states(session, pipeline_id, PageState.url_hash.in_(fresh))
            for key, record in fresh.items():
                timeline.observe(key, record, states.get(key))
            timeline.let_go()
        if health.removes_unseen:
            timeline.remove_unseen(seen)
        if on_recorded is not None:
            on_recorded(session)
    return counts


# Pages compared per batch: their states are read together and let go together.
BATCH_SIZE = 500


def _states(session: Session, pipeline_id: int, where: sa.ColumnElement[bool]) -> dict[str, PageState]:
    """The pipeline's page states matching `where`, by URL hash, without their stored text."""
    query = (
        sa.select(PageState).where(PageState.pipeline_id == pipeline_id, where).options(orm.defer(PageState.content))
    )
    return {state.url_hash: state for state in session.scalars(query)}


class _Timeline:
    """One crawl's comparison, within its transaction."""

    def __init__(
        self,
        session: Session,
        workspace_id: int,
        pipeline_id: int,
        run_id: str,
        now: datetime,
        counts: ChangeCounts,
        health: CrawlHealth,
    ) -> None:
        self.session, self.workspace_id, self.pipeline_id = session, workspace_id, pipeline_id
        self.run_id, self.now, self.counts, self.health = run_id, now, counts, health
        self.documents = _document_ids(session, pipeline_id)

    def observe(self, key: str, record: CrawlRecord, state: PageState | None) -> None:
        counts, url = self.counts, record.url
        if state is not None and state.run_id == self.run_id:
            counts.already_recorded += 1
            return
        observation = _observation(record)
        if observation == "skipped" or (observation == "gone" and not self.health.removes_gone):
            counts.skipped += 1
            return
        if observation == "gone":
            if state is not None and state.content_hash is not None:
                _remove(self.session, state, self.run_id, self.documents.get(url), self.now, counts)
            return
        content = normalize(record.content)
        digest = content_hash(content)
        if state is None:
            state = PageState(
                workspace_id=self.workspace_id, pipeline_id=self.pipeline_id, url=url, url_hash=key, run_id=self.run_id
            )
            self.session.add(state)
        if state.content_hash == digest:
            counts.same += 1
        else:
            status = PageChangeStatus.NEW if state.content_hash is None else PageChangeStatus.CHANGED
            # The stored text is read (deferred) only here, for the diff of a changed page.
            diff = unified_diff(state.content or "", content, url=url) if status is PageChangeStatus.CHANGED else None
            self.session.add(
                PageChange(
                    workspace_id=self.workspace_id,
                    pipeline_id=self.pipeline_id,
                    url=url,
                    document_id=self.documents.get(url),
                    run_id=self.run_id,
                    status=status.value,
                    previous_hash=state.content_hash,
                    current_hash=digest,
                    diff=diff,
                    observed_at=self.now,
                )
            )
            setattr(counts, status.value, getattr(counts, status.value) + 1)
            counts.changes.append((url, status.value))
            state.content_hash, state.content, state.last_changed_at = digest, content, self.now
        state.run_id, state.last_checked_at = self.run_id, self.now

    def let_go(self) -> None:
        """Write what the batch changed and drop its rows from the session (the transaction goes on)."""
        self.session.flush()
        self.session.expunge_all()

    def remove_unseen(self, seen: set[str]) -> None:
        """Remove the pages the crawl did not cover that had a last good observation."""
        live = self.session.execute(
            sa.select(PageState.url_hash).where(
                PageState.pipeline_id == self.pipeline_id, PageState.content_hash.is_not(None)
            )
        )
        for keys in chunks([key for (key,) in live if key not in seen], BATCH_SIZE):
            for state in _states(self.session, self.pipeline_id, PageState.url_hash.in_(keys)).values():
                _remove(self.session, state, self.run_id, self.documents.get(state.url), self.now, self.counts)
            self.let_go()


def _remove(
    session: Session, state: PageState, run_id: str, document_id: int | None, now: datetime, counts: ChangeCounts
) -> None:
    session.add(
        PageChange(
            workspace_id=state.workspace_id,
            pipeline_id=state.pipeline_id,
            url=state.url,
            document_id=document_id,
            run_id=run_id,
            status=PageChangeStatus.REMOVED.value,
            previous_hash=state.content_hash,
            current_hash=None,
            observed_at=now,
        )
    )
    counts.removed += 1
    counts.changes.append((state.url, PageChangeStatus.REMOVED.value))
    state.content_hash, state.content = None, None
    state.run_id, state.last_checked_at, state.last_changed_at = run_id, now, now


def _document_ids(session: Session, pipeline_id: int) -> dict[str, int]:
    """The pipeline's crawled documents by URL (one per URL per pipeline, see `document_identity`)."""
    rows = session.execute(
        sa.select(Document.url, Document.id).where(
            Document.pipeline_id == pipeline_id, Document.document_type == DOCUMENT_TYPE
        )
    )
    return {url: document_id for url, document_id in rows if url is not None}


ChangeStatus = Literal["new", "changed", "removed"]


class PageChangeView(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(from_attributes=True)

    id: int
    pipeline_id: int
    url: str
    document_id: int | None
    run_id: str
    status: ChangeStatus
    previous_hash: str | None
    current_hash: str | None
    diff: str | None
    observed_at: datetime


def list_changes(
    session: Session,
    *,
    workspace_id: int,
    pipeline_id: int | None = None,
    status: str | None = None,
    since: datetime | None = None,
    before_id: int | None = None,
    limit: int = 20,
) -> tuple[list[PageChangeView], int | None]:
    """A workspace's timeline rows, newest first, and the id to pass as `before_id` for the next page."""
    query = sa.select(PageChange).where(PageChange.workspace_id == workspace_id)
    if pipeline_id is not None:
        query = query.where(PageChange.pipeline_id == pipeline_id)
    if status is not None:
        query = query.where(PageChange.status == status)
    if since is not None:
        query = query.where(PageChange.observed_at >= since)
    if before_id is not None:
        query = query.where(PageChange.id < before_id)
    found = list(session.scalars(query.order_by(PageChange.id.desc()).limit(limit + 1)))
    rows = [PageChangeView.model_validate(change) for change in found[:limit]]
    return rows, (rows[-1].id if len(found) > limit else None)


def get_change(session: Session, *, workspace_id: int, pipeline_id: int, change_id: int) -> PageChangeView:
    """One timeline row of a pipeline, with its diff; NotFoundError when it is not that pipeline's."""
    change = session.get(PageChange, change_id)
    if change is None or change.workspace_id != workspace_id or change.pipeline_id != pipeline_id:
        raise NotFoundError(f"pipeline {pipeline_id} has no page change {change_id}")
    return PageChangeView.model_validate(change)
