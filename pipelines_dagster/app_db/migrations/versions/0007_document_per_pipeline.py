"""documents per pipeline: a crawled document's identity is (workspace, pipeline, URL), not (workspace, URL)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# Read and written a batch at a time, in id order, so a large documents table never sits in memory.
BATCH_SIZE = 1000
CRAWLED = "CRAWLED_URL"

documents = sa.table(
    "documents",
    sa.column("id", sa.BigInteger),
    sa.column("workspace_id", sa.BigInteger),
    sa.column("pipeline_id", sa.BigInteger),
    sa.column("document_type", sa.String),
    sa.column("url", sa.Text),
    sa.column("unique_identifier_hash", sa.String),
)
Row = sa.Row[int, int, int, str]


# The identities as this revision knows them, written out here: the code's may change later.
def _per_pipeline(row: Row) -> str:
    return hashlib.sha256(f"{CRAWLED}:{row.url}:{row.workspace_id}:{row.pipeline_id}".encode()).hexdigest()


def _per_workspace(row: Row) -> str:
    return hashlib.sha256(f"{CRAWLED}:{row.url}:{row.workspace_id}".encode()).hexdigest()


def _rewrite(identity: Callable[[Row], str], update: sa.Update, *, newest_first: bool) -> None:
    """Give every crawled document of a pipeline `identity`, a batch at a time, through `update`
    (bound to `row_id` and `identity`)."""
    bind = op.get_bind()
    order = documents.c.id.desc() if newest_first else documents.c.id
    last: int | None = None
    while True:
        query = sa.select(documents.c.id, documents.c.workspace_id, documents.c.pipeline_id, documents.c.url).where(
            documents.c.document_type == CRAWLED,
            documents.c.url.is_not(None),
            # A document whose pipeline was deleted is no pipeline's to find again: it keeps its identity.
            documents.c.pipeline_id.is_not(None),
        )
        if last is not None:
            query = query.where(documents.c.id < last if newest_first else documents.c.id > last)
        rows = bind.execute(query.order_by(order).limit(BATCH_SIZE)).all()
        if not rows:
            return
        bind.execute(update, [{"row_id": row.id, "identity": identity(row)} for row in rows])
        last = rows[-1].id


def upgrade() -> None:
    # No two rows collide: the old identity held one document per URL and workspace.
    by_id = documents.c.id == sa.bindparam("row_id")
    _rewrite(
        _per_pipeline,
        sa.update(documents).where(by_id).values(unique_identifier_hash=sa.bindparam("identity")),
        newest_first=False,
    )


def downgrade() -> None:
    # Pipelines that shared a URL hold a document each now; the old identity allows one per URL,
    # so the newest takes it and the others keep theirs (still unique, no longer found by URL).
    by_id = documents.c.id == sa.bindparam("row_id")
    other = documents.alias("other")
    taken = sa.exists().where(other.c.unique_identifier_hash == sa.bindparam("identity"))
    _rewrite(
        _per_workspace,
        sa.update(documents).where(by_id, ~taken).values(unique_identifier_hash=sa.bindparam("identity")),
        newest_first=True,
    )
