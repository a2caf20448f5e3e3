"""The KB follows the site: documents whose page left the crawl are archived, never deleted, and only
after a healthy crawl, so a broken or truncated crawl never empties the KB. Restoring is indexing's
part (`kb_index`): a page stored again is no longer archived."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Document
from pipelines_dagster.core.kb_index import DEFAULT_BATCH_SIZE, DOCUMENT_TYPE, Destination, chunks

# A pipeline may set its own threshold in its config, e.g. {"MIN_SUCCESS_RATIO": 0.95}.
THRESHOLD_KEY = "MIN_SUCCESS_RATIO"
DEFAULT_MIN_SUCCESS_RATIO = 0.8


def success_threshold(config: Mapping[str, Any], *, default: float = DEFAULT_MIN_SUCCESS_RATIO) -> float:
    """The share of URLs a pipeline's crawl must get right: the crawl check's and archiving's one threshold."""
    return float(config.get(THRESHOLD_KEY, default))


def succeeded_share(*, succeeded: int, attempted: int) -> float:
    return succeeded / attempted if attempted else 0.0


def crawl_health_problem(*, succeeded: int, attempted: int, threshold: float, truncated: bool) -> str | None:
    """Why a crawl cannot tell which pages left (a sentence for the run's log), or None when it can."""
    if truncated:
        return "discovery stopped at max pages, so pages past the limit were not looked for"
    if not attempted:
        return "the crawl attempted no URLs"
    ratio = succeeded_share(succeeded=succeeded, attempted=attempted)
    if ratio < threshold:
        return f"{succeeded} of {attempted} URLs succeeded ({ratio:.0%}), under the threshold of {threshold:.0%}"
    return None


def crawl_is_healthy(*, succeeded: int, attempted: int, threshold: float, truncated: bool) -> bool:
    """Whether a crawl's absences mean the pages left: success ratio at the threshold and not truncated."""
    return (
        crawl_health_problem(succeeded=succeeded, attempted=attempted, threshold=threshold, truncated=truncated) is None
    )


def archive_missing(
    sessions: sessionmaker[Session],
    destination: Destination,
    *,
    crawled_urls: Collection[str],
    gone_urls: Collection[str],
    run_id: str,
    now: datetime,
) -> int:
    """Archive the pipeline's documents whose URL the crawl did not cover or that answered 404/410;
    the number archived. Only the health-checked caller decides whether to call this.

    A document archived already keeps the run that archived it, so a re-run over the same crawl
    archives nothing more.
    """
    covered = set(crawled_urls) - set(gone_urls)
    with transaction(sessions) as session:
        live = session.execute(
            sa.select(Document.id, Document.url).where(
                Document.workspace_id == destination.workspace_id,
                Document.pipeline_id == destination.pipeline_id,
                Document.document_type == DOCUMENT_TYPE,
                Document.archived_at.is_(None),
            )
        )
        leaving = [document_id for document_id, url in live if url not in covered]
        for ids in chunks(leaving, DEFAULT_BATCH_SIZE):
            session.execute(
                sa.update(Document).where(Document.id.in_(ids)).values(archived_at=now, archived_by_run_id=run_id)
            )
    return len(leaving)
