"""A workspace's credit ledger and holds as the tests read them: straight from the app database."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import CreditAccount, CreditHold, CreditLedgerEntry


def charges(
    sessions: sessionmaker[Session], workspace_id: int, column: Any = CreditLedgerEntry.idempotency_key
) -> list:
    """`column` of each of the workspace's charges, in ledger order."""
    with sessions() as session:
        return list(
            session.scalars(
                sa.select(column)
                .join(CreditAccount)
                .where(CreditAccount.workspace_id == workspace_id, CreditLedgerEntry.kind == "charge")
                .order_by(CreditLedgerEntry.id)
            )
        )


def holds(sessions: sessionmaker[Session], workspace_id: int, *columns: Any, status: str | None = None) -> list:
    """`columns` of each of the workspace's credit holds (of one `status`, else all), oldest first: one
    value per hold for one column, else a tuple."""
    query = sa.select(*columns).join(CreditAccount).where(CreditAccount.workspace_id == workspace_id)
    if status is not None:
        query = query.where(CreditHold.status == status)
    with sessions() as session:
        rows = session.execute(query.order_by(CreditHold.id)).all()
    return [row[0] if len(columns) == 1 else tuple(row) for row in rows]
