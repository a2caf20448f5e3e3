"""Crawl credit: per-workspace accounts, an append-only ledger, holds, and charges that happen once.

Before its first request a crawl reserves what it may spend with a hold, in the transaction that
checks the account's balance less its open holds; reservations of one account take turns on its row
(a row lock on PostgreSQL, the writer lock on SQLite), so concurrent runs never promise the same
credit twice. The charge of the crawl's successes settles its hold in one transaction. A charge and
its hold are keyed by one idempotency key (root run and partition) under unique constraints, so a
retried or re-executed step neither reserves nor debits twice, and a key already charged is never
refused for credit.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import dialect_insert, transaction
from pipelines_dagster.app_db.models import (
    CreditAccount,
    CreditHold,
    CreditLedgerEntry,
    HoldStatus,
    LedgerKind,
    TokenUsage,
    Workspace,
)
from pipelines_dagster.core.errors import NotFoundError

WEB_CRAWL_USAGE = "web_crawl"
# An open hold stops reserving after this: the backstop for a run whose end nothing saw (the run-end
# sensors release a hold within seconds). Far past any run's maximum runtime, so a live run keeps it.
HOLD_TTL = timedelta(hours=24)


class InsufficientCreditsError(Exception):
    """The workspace cannot pay for the crawl it asked for."""


class UnknownWorkspaceError(NotFoundError):
    pass


@dataclass(frozen=True, kw_only=True)
class ChargeResult:
    micros: int
    """What the key has debited, now or earlier (0 when nothing was due)."""
    newly_charged: bool
    """False when billing is off, nothing was due, or the key had already been charged."""
    ledger_entry_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class Charged:
    """A charge just made, as `Billing`'s hook hears of it inside the charge's transaction."""

    workspace_id: int
    micros: int
    balance_before: int
    balance_after: int
    ledger_entry_id: int
    usage: Mapping[str, Any]


ChargeHook = Callable[[Session, Charged], object]
"""Told of each new charge in its transaction (the wiring queues credits.low notifications with it)."""


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """What `reserve` did for a crawl."""

    micros: int = 0
    """What the crawl's hold reserves (0 with billing off, or when it is paid for already)."""
    paid: bool = False
    """The key is charged in the ledger already (a retry or re-execution): no check, no hold."""


@dataclass(frozen=True, kw_only=True)
class CreditSummary:
    balance_micros: int
    held_micros: int
    """Reserved by the open holds of crawls under way."""

    @property
    def available_micros(self) -> int:
        """What a new crawl can reserve."""
        return self.balance_micros - self.held_micros


class Billing:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        enabled: bool,
        micros_per_crawl: int,
        on_charged: ChargeHook | None = None,
    ) -> None:
        if micros_per_crawl < 0:
            raise ValueError("micros_per_crawl must be zero or more")
        self._sessions = sessions
        self._on_charged = on_charged
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

    def summary(self, workspace_id: int, *, now: datetime | None = None) -> CreditSummary:
        with self._sessions() as session:
            account = session.scalar(sa.select(CreditAccount).where(CreditAccount.workspace_id == workspace_id))
            if account is None:
                _owner_of(session, workspace_id)
                return CreditSummary(balance_micros=0, held_micros=0)
            held = _held(session, account.id, now or _now())
            return CreditSummary(balance_micros=account.balance_micros, held_micros=held)

    def reserve(
        self, workspace_id: int, pages: int, *, idempotency_key: str, run_id: str, now: datetime | None = None
    ) -> Reservation:
        """Hold credit for `pages` successes under `idempotency_key` for `run_id`, or raise
        InsufficientCreditsError when the balance less the open holds cannot cover them.

        The key's own open hold (a retry's, or a re-execution's of the same root run) is taken over
        by `run_id`, topped up if the crawl grew; a key charged already reserves nothing.
        """
        if not self.enabled:
            return Reservation()
        moment = now or _now()
        needed = self.successes_to_micros(pages)
        with transaction(self._sessions) as session:
            account_id = _account_id(session, workspace_id)
            balance = _locked_balance(session, account_id)
            if _charged(session, idempotency_key):
                return Reservation(paid=True)
            hold = session.scalar(sa.select(CreditHold).where(CreditHold.idempotency_key == idempotency_key))
            if hold is not None and hold.account_id != account_id:
                raise ValueError(f"idempotency key {idempotency_key!r} belongs to another workspace's hold")
            live = hold is not None and hold.status == HoldStatus.OPEN.value and hold.expires_at > moment
            ours = hold.micros if hold is not None and live else 0
            available = balance - (_held(session, account_id, moment) - ours)
            if available < needed:
                raise InsufficientCreditsError(
                    f"out of crawl credit: {pages} pages need {needed} micros but workspace {workspace_id} has "
                    f"{available} available ({balance} balance, {balance - available} held by crawls under way); "
                    f"grant more with `pipelines-dagster credits grant --workspace {workspace_id} --micros N`"
                )
            if hold is None:
                hold = CreditHold(account_id=account_id, idempotency_key=idempotency_key)
                session.add(hold)
            hold.run_id, hold.micros, hold.status = run_id, max(needed, ours), HoldStatus.OPEN.value
            hold.expires_at, hold.closed_at = moment + HOLD_TTL, None
            return Reservation(micros=hold.micros)

    def release_holds(self, run_id: str, *, now: datetime | None = None) -> int:
        """Give back the open holds `run_id` holds (its run ended without charging them); how many."""
        return self._release(CreditHold.run_id == run_id, now)

    def open_hold_runs(self) -> list[str]:
        """The runs holding open holds: retention asks Dagster which of them have ended."""
        with self._sessions() as session:
            query = sa.select(CreditHold.run_id).where(CreditHold.status == HoldStatus.OPEN.value).distinct()
            return list(session.scalars(query))

    def release_expired(self, *, now: datetime | None = None) -> int:
        """Close the open holds past their expiry (they reserve nothing already); how many."""
        moment = now or _now()
        return self._release(CreditHold.expires_at <= moment, moment)

    def _release(self, which: sa.ColumnElement[bool], now: datetime | None) -> int:
        with transaction(self._sessions) as session:
            result = session.execute(
                sa.update(CreditHold)
                .where(which, CreditHold.status == HoldStatus.OPEN.value)
                .values(status=HoldStatus.RELEASED.value, closed_at=now or _now())
            )
            assert isinstance(result, sa.CursorResult)
            return result.rowcount

    def charge(
        self,
        workspace_id: int,
        micros: int,
        *,
        idempotency_key: str,
        usage: Mapping[str, Any],
    ) -> ChargeResult:
        """Debit once per key, writing ledger row, balance and `web_crawl` usage row together, and
        settle the key's hold in the same transaction (what it reserved beyond `micros` is free again).

        The hold reserved the most the crawl could succeed at, so the debit stays within it.
        """
        if micros < 0:
            raise ValueError("a charge must be zero or more micros")
        if not self.enabled:
            return ChargeResult(micros=0, newly_charged=False)
        with transaction(self._sessions) as session:
            owner = _owner_of(session, workspace_id)
            account_id = _account_id(session, workspace_id)
            _locked_balance(session, account_id)
            session.execute(
                sa.update(CreditHold)
                .where(CreditHold.idempotency_key == idempotency_key, CreditHold.status == HoldStatus.OPEN.value)
                .values(status=HoldStatus.SETTLED.value, closed_at=_now())
            )
            if micros == 0:
                return ChargeResult(micros=0, newly_charged=False)
            entry_id = _insert_ledger(session, account_id, LedgerKind.CHARGE, -micros, idempotency_key)
            if entry_id is None:
                earlier = session.scalars(
                    sa.select(CreditLedgerEntry).where(CreditLedgerEntry.idempotency_key == idempotency_key)
                ).one()
                if earlier.account_id != account_id or earlier.kind != LedgerKind.CHARGE:
                    raise ValueError(f"idempotency key {idempotency_key!r} belongs to another ledger entry")
                return ChargeResult(micros=-earlier.delta_micros, newly_charged=False, ledger_entry_id=earlier.id)
            balance = _add_to_balance(session, account_id, -micros)
            if self._on_charged is not None:
                self._on_charged(
                    session,
                    Charged(
                        workspace_id=workspace_id,
                        micros=micros,
                        balance_before=balance + micros,
                        balance_after=balance,
                        ledger_entry_id=entry_id,
                        usage=usage,
                    ),
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


def _now() -> datetime:
    return datetime.now(UTC)


def _locked_balance(session: Session, account_id: int) -> int:
    """The account's balance, its row locked until the transaction ends, so reservations and charges
    of one account take turns (on SQLite every transaction here begins IMMEDIATE: the writer lock)."""
    return session.execute(
        sa.select(CreditAccount.balance_micros).where(CreditAccount.id == account_id).with_for_update()
    ).scalar_one()


def _held(session: Session, account_id: int, now: datetime) -> int:
    """What the account's open, unexpired holds reserve."""
    return session.execute(
        sa.select(sa.func.coalesce(sa.func.sum(CreditHold.micros), 0)).where(
            CreditHold.account_id == account_id,
            CreditHold.status == HoldStatus.OPEN.value,
            CreditHold.expires_at > now,
        )
    ).scalar_one()


def _charged(session: Session, idempotency_key: str) -> bool:
    return (
        session.scalar(sa.select(CreditLedgerEntry.id).where(CreditLedgerEntry.idempotency_key == idempotency_key))
        is not None
    )


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
