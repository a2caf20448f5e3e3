"""The KB follows the site: documents whose page left the crawl are archived, never deleted, and only
as far as the crawl's health allows (`crawl.health`), so a broken or truncated crawl never empties
the KB. Restoring is indexing's part (`kb.index`): a page stored again is no longer archived."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Document
from pipelines_dagster.core.crawl.health import CrawlHealth
from pipelines_dagster.core.kb.index import DEFAULT_BATCH_SIZE, DOCUMENT_TYPE, Destination, chunks


def archive_missing(
    sessions: sessionmaker[Session],
    destination: Destination,
    *,
    health: CrawlHealth,
    crawled_urls: Collection[str],
    gone_urls: Collection[str],
    run_id: str,
    now: datetime,
) -> int:
    """Archive the pipeline's documents whose page left: those that answered 404/410 and, after a
    complete crawl, those it did not cover; none after an unhealthy crawl. The number archived.

    A document archived already keeps the run that archived it, so a re-run over the same crawl
    archives nothing more.
    """
    if not health.removes_gone:
        return 0
    gone = set(gone_urls)
    covered = set(crawled_urls) - gone
    with transaction(sessions) as session:
        live = session.execute(
            sa.select(Document.id, Document.url).where(
                Document.workspace_id == destination.workspace_id,
                Document.pipeline_id == destination.pipeline_id,
                Document.document_type == DOCUMENT_TYPE,
                Document.archived_at.is_(None),
            )
        )
        leaving = [
            document_id for document_id, url in live if url in gone or (health.removes_unseen and url not in covered)
        ]
        for ids in chunks(leaving, DEFAULT_BATCH_SIZE):
            session.execute(
                sa.update(Document).where(Document.id.in_(ids)).values(archived_at=now, archived_by_run_id=run_id)
            )
    return len(leaving)
