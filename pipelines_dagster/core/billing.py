"""Crawl credit: per-workspace accounts, an append-only ledger, and charges that happen once.

A charge is keyed by an idempotency key under a unique constraint, so a retried
or re-executed step can call `charge` again and nothing is debited twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import dialect_insert, transaction
from pipelines_dagster.app_db.models import (
    CreditAccount,
    CreditLedgerEntry,
    LedgerKind,
    TokenUsage,
    Workspace,
)
from pipelines_dagster.notifications.events import queue_credits_low

WEB_CRAWL_USAGE = "web_crawl"


class InsufficientCreditsError(Exception):
    """The workspace cannot pay for the crawl it asked for."""


class UnknownWorkspaceError(LookupError):
    pass


@dataclass(frozen=True, kw_only=True)
class ChargeResult:
    micros: int
    """What the key has debited, now or earlier (0 when nothing was due)."""
    newly_charged: bool
    """False when billing is off, nothing was due, or the key had already been charged."""
    ledger_entry_id: int | None = None


class Billing:
    def __init__(self, sessions: sessionmaker[Session], *, enabled: bool, micros_per_crawl: int) -> None:
        if micros_per_crawl < 0:
            raise ValueError("micros_per_crawl must be zero or more")
        self._sessions = sessions
        self.enabled = enabled
        self.micros_per_crawl = micros_per_crawl

    def successes_to_micros(self, successes: int) -> int:
        return successes * self.micros_per_crawl

    def balance(self, workspace_id: int) -> int:
        with self._sessions() as session:
            balance = session.scalar(
                sa.select(CreditAccount.balance_micros).where(CreditAccount.workspace_id == workspace_id)
            )
            if balance is None:
                _owner_of(session, workspace_id)
            return balance or 0

    def grant(self, workspace_id: int, micros: int, *, idempotency_key: str | None = None) -> int:
        """Add credit; returns the new balance. Works with billing off, so credit can be preloaded."""
        if micros <= 0:
            raise ValueError("a grant must be a positive number of micros")
        key = idempotency_key or f"grant:{uuid.uuid4()}"
        with transaction(self._sessions) as session:
            account_id = _account_id(session, workspace_id)
            if _insert_ledger(session, account_id, LedgerKind.GRANT, micros, key) is not None:
                _add_to_balance(session, account_id, micros)
            return session.execute(
                sa.select(CreditAccount.balance_micros).where(CreditAccount.id == account_id)
            ).scalar_one()

    def check_credits(self, workspace_id: int, url_count: int) -> None:
        """Raise InsufficientCreditsError unless the balance covers every URL succeeding."""
        if not self.enabled:
            return
        needed = self.successes_to_micros(url_count)
        balance = self.balance(workspace_id)
        if balance < needed:
            raise InsufficientCreditsError(
                f"out of crawl credit: {url_count} URLs need {needed} micros but workspace "
                f"{workspace_id} has {balance}; grant more with "
                f"`pipelines-dagster credits grant --workspace {workspace_id} --micros N`"
            )

    def charge(
        self,
        workspace_id: int,
        micros: int,
        *,
        idempotency_key: str,
        usage: Mapping[str, Any],
    ) -> ChargeResult:
        """Debit once per key, writing ledger row, balance and `web_crawl` usage row together.

        The debit may take the balance below zero: the crawl has already happened,
        and the pre-check is where a run is refused.
        """
        if micros < 0:
            raise ValueError("a charge must be zero or more micros")
        if not self.enabled or micros == 0:
            return ChargeResult(micros=0, newly_charged=False)
        with transaction(self._sessions) as session:
            owner = _owner_of(session, workspace_id)
            account_id = _account_id(session, workspace_id)
            entry_id = _insert_ledger(session, account_id, LedgerKind.CHARGE, -micros, idempotency_key)
            if entry_id is None:
                earlier = session.scalars(
                    sa.select(CreditLedgerEntry).where(CreditLedgerEntry.idempotency_key == idempotency_key)
                ).one()
                if earlier.account_id != account_id or earlier.kind != LedgerKind.CHARGE:
                    raise ValueError(f"idempotency key {idempotency_key!r} belongs to another ledger entry")
                return ChargeResult(micros=-earlier.delta_micros, newly_charged=False, ledger_entry_id=earlier.id)
            balance = _add_to_balance(session, account_id, -micros)
            queue_credits_low(
                session,
                workspace_id=workspace_id,
                balance_before=balance + micros,
                balance_after=balance,
                ledger_entry_id=entry_id,
                pipeline_id=usage.get("pipeline_id"),
                run_id=usage.get("run_id"),
            )
            session.add(
                TokenUsage(
                    workspace_id=workspace_id,
                    user_id=owner,
                    usage_type=WEB_CRAWL_USAGE,
                    cost_micros=micros,
                    call_details=dict(usage),
                    ledger_entry_id=entry_id,
                )
            )
            return ChargeResult(micros=micros, newly_charged=True, ledger_entry_id=entry_id)


def _owner_of(session: Session, workspace_id: int) -> str:
    owner = session.scalar(sa.select(Workspace.owner_user_id).where(Workspace.id == workspace_id))
    if owner is None:
        raise UnknownWorkspaceError(f"workspace {workspace_id} does not exist")
    return owner


def _account_id(session: Session, workspace_id: int) -> int:
    """The workspace's account, created on first use; safe when two callers race."""
    owner = _owner_of(session, workspace_id)
    session.execute(
        dialect_insert(session, CreditAccount)
        .values(workspace_id=workspace_id, owner_user_id=owner, balance_micros=0)
        .on_conflict_do_nothing(index_elements=["workspace_id"])
    )
    return session.execute(sa.select(CreditAccount.id).where(CreditAccount.workspace_id == workspace_id)).scalar_one()


def _insert_ledger(session: Session, account_id: int, kind: LedgerKind, delta: int, key: str) -> int | None:
    """The new entry's id, or None when the key is already in the ledger."""
    return session.scalar(
        dialect_insert(session, CreditLedgerEntry)
        .values(account_id=account_id, kind=kind.value, delta_micros=delta, idempotency_key=key)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(CreditLedgerEntry.id)
    )


def _add_to_balance(session: Session, account_id: int, delta: int) -> int:
    """The balance after adding `delta`."""
    return session.execute(
        sa.update(CreditAccount)
        .where(CreditAccount.id == account_id)
        .values(balance_micros=CreditAccount.balance_micros + delta)
        .returning(CreditAccount.balance_micros)
    ).scalar_one()
