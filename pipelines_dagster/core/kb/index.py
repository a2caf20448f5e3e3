"""Turn a stored crawl into knowledge-base documents: pending rows first, then content.

Phase one makes a `pending` document for every URL the pipeline has none for
yet, so the KB shows what is coming; phase two fills in content in batches,
updating in place and skipping pages whose content hash has not changed. A
failed or empty page marks its document failed but keeps its last good
content; an archived document whose page is stored again is restored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import dialect_insert
from pipelines_dagster.app_db.models import Document, DocumentState
from pipelines_dagster.core.crawl.record import CrawlRecord

DOCUMENT_TYPE = "CRAWLED_URL"
DEFAULT_BATCH_SIZE = 500
T = TypeVar("T")
# A page answering these is gone; any other failure is a bad crawl that says nothing about the page.
GONE_HTTP_STATUSES = frozenset({404, 410})


def document_identity(url: str, *, workspace_id: int, pipeline_id: int) -> str:
    """One document per URL per pipeline: two pipelines that crawl one URL into their own folders
    keep a document each, instead of moving one between them on every crawl."""
    return hashlib.sha256(f"{DOCUMENT_TYPE}:{url}:{workspace_id}:{pipeline_id}".encode()).hexdigest()


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


@dataclass(kw_only=True)
class IndexStats:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: int = 0
    restored: int = 0
    """Archived documents whose page this crawl stored again (counted as created/updated/unchanged too)."""
    crawled_urls: set[str] = field(default_factory=set)
    gone_urls: set[str] = field(default_factory=set)
    """The crawl's URLs that answered 404/410: what archiving needs, gathered while indexing so the
    blob is not read a third time."""


@dataclass(frozen=True, kw_only=True)
class Destination:
    workspace_id: int
    pipeline_id: int
    connector_id: int | None
    folder_id: int | None
    """None is the workspace root."""


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """`items` in lists of `size`, the last one shorter (itertools.batched from Python 3.12)."""
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def index_crawl(
    sessions: sessionmaker[Session],
    destination: Destination,
    records: Callable[[], Iterable[CrawlRecord]],
    *,
    urls: Iterable[str] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> IndexStats:
    """Index crawl records (one per URL, as stored in the crawl blob). `records` is read twice, for
    the pending rows and then for content, or only for content when `urls` are the crawl's URLs in
    its order already (read while checking its blob)."""
    _create_pending(sessions, destination, (record.url for record in records()) if urls is None else urls, batch_size)
    stats = IndexStats()
    for batch in chunks(records(), batch_size):
        with sessions() as session, session.begin():
            by_identity = _documents(session, destination, batch)
            for record in batch:
                document = by_identity[_identity(record.url, destination)]
                stats.crawled_urls.add(record.url)
                if record.succeeded:
                    _apply_content(document, record, destination, stats)
                else:
                    document.status_state = DocumentState.FAILED.value
                    document.status_reason = record.error or f"crawl ended {record.status}"
                    stats.failed += 1
                    if record.http_status in GONE_HTTP_STATUSES:
                        stats.gone_urls.add(record.url)
    return stats


def _create_pending(
    sessions: sessionmaker[Session],
    destination: Destination,
    urls: Iterable[str],
    batch_size: int,
) -> None:
    """Insert pending rows for URLs the pipeline has no document for."""
    for batch in chunks(urls, batch_size):
        identities = {_identity(url, destination): url for url in batch}
        with sessions() as session, session.begin():
            # On a re-crawl every document exists already: look before inserting anything.
            existing = set(
                session.scalars(
                    sa.select(Document.unique_identifier_hash).where(Document.unique_identifier_hash.in_(identities))
                )
            )
            rows: list[dict[str, object]] = [
                {
                    "workspace_id": destination.workspace_id,
                    "folder_id": destination.folder_id,
                    "connector_id": destination.connector_id,
                    "pipeline_id": destination.pipeline_id,
                    "document_type": DOCUMENT_TYPE,
                    "url": url,
                    "unique_identifier_hash": identity,
                    "title": url,
                    "document_metadata": {},
                    "status_state": DocumentState.PENDING.value,
                }
                for identity, url in identities.items()
                if identity not in existing
            ]
            if rows:
                # Another run may insert the same URL meanwhile: its row stands.
                insert = dialect_insert(session, Document).on_conflict_do_nothing(
                    index_elements=["unique_identifier_hash"]
                )
                session.execute(insert, rows)


def _identity(url: str, destination: Destination) -> str:
    return document_identity(url, workspace_id=destination.workspace_id, pipeline_id=destination.pipeline_id)


def _documents(session: Session, destination: Destination, batch: list[CrawlRecord]) -> dict[str, Document]:
    """The batch's documents, without their content: an unchanged page only compares hashes."""
    identities = [_identity(record.url, destination) for record in batch]
    documents = session.scalars(
        sa.select(Document)
        .where(Document.unique_identifier_hash.in_(identities))
        .options(orm.defer(Document.content), orm.defer(Document.document_metadata))
    )
    return {document.unique_identifier_hash: document for document in documents}


def _apply_content(
    document: Document,
    record: CrawlRecord,
    destination: Destination,
    stats: IndexStats,
) -> None:
    # A document that never held content (pending, or failed until now) is created by this crawl.
    is_new = document.content_hash is None
    if document.archived_at is not None:
        document.archived_at, document.archived_by_run_id = None, None
        stats.restored += 1
    content = record.content
    digest = record.content_hash or content_hash(content)
    if (
        not is_new
        and document.content_hash == digest
        and document.status_state == DocumentState.READY.value
        and document.folder_id == destination.folder_id
    ):
        stats.unchanged += 1
        return
    metadata = dict(record.metadata)
    document.content = content
    document.content_hash = digest
    document.title = metadata.get("title") or record.url
    document.document_metadata = metadata
    document.status_state = DocumentState.READY.value
    document.status_reason = None
    document.folder_id = destination.folder_id
    document.connector_id = destination.connector_id
    if is_new:
        stats.created += 1
    else:
        stats.updated += 1
