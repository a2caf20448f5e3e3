"""The page-change timeline: each crawl compared with the last good crawl of every page, and queries over it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import pydantic
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Document, PageChange, PageChangeStatus, PageState
from pipelines_dagster.core.crawl_record import CrawlRecord
from pipelines_dagster.core.kb_index import DOCUMENT_TYPE, GONE_HTTP_STATUSES, content_hash

Observation = Literal["seen", "gone", "skipped"]

MAX_DIFF_BYTES = 64 * 1024
TRUNCATED_NOTE = "\n... diff truncated at {limit} bytes of {total}\n"
MAX_LIMIT = 100


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
    # Failed or empty this time (not 404/410): the last good observation stands.
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
    now: datetime | None = None,
    truncated: bool = False,
) -> ChangeCounts:
    """Compare a crawl's records with each page's last good observation and append the timeline rows.

    All in one transaction, and keyed by the crawl's run id, so a retry or backfill over the
    same crawl appends nothing twice. URLs absent from this crawl are removed, unless it is
    `truncated` (a site crawl that stopped at max pages: what it did not reach may still be there).
    """
    now = now or datetime.now(UTC)
    counts = ChangeCounts()
    with transaction(sessions) as session:
        states = {
            state.url_hash: state
            for state in session.scalars(sa.select(PageState).where(PageState.pipeline_id == pipeline_id))
        }
        documents = _document_ids(session, workspace_id)
        seen: set[str] = set()
        for record in records:
            url = record.url
            key = content_hash(url)
            if key in seen:
                continue
            seen.add(key)
            state = states.get(key)
            if state is not None and state.run_id == run_id:
                counts.already_recorded += 1
                continue
            observation = _observation(record)
            if observation == "skipped":
                counts.skipped += 1
                continue
            if observation == "gone":
                if state is not None and state.content_hash is not None:
                    _remove(session, state, run_id, documents.get(url), now, counts)
                continue
            content = normalize(record.content)
            digest = content_hash(content)
            if state is None:
                state = PageState(
                    workspace_id=workspace_id, pipeline_id=pipeline_id, url=url, url_hash=key, run_id=run_id
                )
                session.add(state)
            if state.content_hash == digest:
                counts.same += 1
            else:
                status = PageChangeStatus.NEW if state.content_hash is None else PageChangeStatus.CHANGED
                diff = (
                    unified_diff(state.content or "", content, url=url) if status is PageChangeStatus.CHANGED else None
                )
                session.add(
                    PageChange(
                        workspace_id=workspace_id,
                        pipeline_id=pipeline_id,
                        url=url,
                        document_id=documents.get(url),
                        run_id=run_id,
                        status=status.value,
                        previous_hash=state.content_hash,
                        current_hash=digest,
                        diff=diff,
                        observed_at=now,
                    )
                )
                setattr(counts, status.value, getattr(counts, status.value) + 1)
                counts.changes.append((url, status.value))
                state.content_hash, state.content, state.last_changed_at = digest, content, now
            state.run_id, state.last_checked_at = run_id, now
        for key, state in states.items():
            if not truncated and key not in seen and state.content_hash is not None:
                _remove(session, state, run_id, documents.get(state.url), now, counts)
    return counts


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


def _document_ids(session: Session, workspace_id: int) -> dict[str, int]:
    """The workspace's crawled documents by URL (one per URL per workspace, see `document_identity`)."""
    rows = session.execute(
        sa.select(Document.url, Document.id).where(
            Document.workspace_id == workspace_id, Document.document_type == DOCUMENT_TYPE
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
