"""Billing: pre-check, idempotent charges, usage rows; concurrency on real PostgreSQL."""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import CreditAccount, CreditLedgerEntry, TokenUsage, Workspace
from pipelines_dagster.core.billing import Billing, InsufficientCreditsError, UnknownWorkspaceError


def make_workspace(sessions) -> int:
    with transaction(sessions) as session:
        workspace = Workspace(name="acme", owner_user_id=f"user-{uuid.uuid4().hex[:6]}")
        session.add(workspace)
        session.flush()
        return workspace.id


def counts(sessions, workspace_id: int) -> tuple[int, int]:
    with sessions() as session:
        ledger = session.scalar(
            sa.select(sa.func.count())
            .select_from(CreditLedgerEntry)
            .join(CreditAccount)
            .where(CreditAccount.workspace_id == workspace_id, CreditLedgerEntry.kind == "charge")
        )
        usage = session.scalar(
            sa.select(sa.func.count()).select_from(TokenUsage).where(TokenUsage.workspace_id == workspace_id)
        )
        return ledger, usage


def test_successes_to_micros_uses_the_configured_price(sessions):
    assert Billing(sessions, enabled=True, micros_per_crawl=250).successes_to_micros(4) == 1000


def test_check_credits_refuses_when_balance_cannot_cover_every_url(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    billing.grant(workspace_id, 2999)
    with pytest.raises(InsufficientCreditsError, match=r"out of crawl credit.*3 URLs need 3000"):
        billing.check_credits(workspace_id, 3)
    billing.check_credits(workspace_id, 2)


def test_check_credits_passes_anything_when_billing_is_disabled(sessions):
    billing = Billing(sessions, enabled=False, micros_per_crawl=1000)
    billing.check_credits(make_workspace(sessions), 10_000)


def test_charge_debits_writes_ledger_and_web_crawl_usage_in_one_go(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    billing.grant(workspace_id, 10_000)
    result = billing.charge(
        workspace_id, 3000, idempotency_key=f"run-1:{workspace_id}", usage={"urls": 5, "successes": 3}
    )
    assert result.newly_charged and result.micros == 3000
    assert billing.balance(workspace_id) == 7000
    with sessions() as session:
        usage = session.scalars(sa.select(TokenUsage).where(TokenUsage.workspace_id == workspace_id)).one()
    assert (usage.usage_type, usage.cost_micros, usage.call_details) == (
        "web_crawl",
        3000,
        {"urls": 5, "successes": 3},
    )
    assert usage.ledger_entry_id == result.ledger_entry_id


def test_the_same_key_charged_twice_debits_once(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    billing.grant(workspace_id, 10_000)
    key = f"run-2:{workspace_id}"
    first = billing.charge(workspace_id, 4000, idempotency_key=key, usage={})
    second = billing.charge(workspace_id, 4000, idempotency_key=key, usage={})
    assert first.newly_charged and not second.newly_charged
    assert second.micros == 4000 and second.ledger_entry_id == first.ledger_entry_id
    assert billing.balance(workspace_id) == 6000
    assert counts(sessions, workspace_id) == (1, 1)


def test_disabled_billing_charges_nothing_and_writes_no_usage(sessions):
    billing = Billing(sessions, enabled=False, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    result = billing.charge(workspace_id, 5000, idempotency_key=f"run-3:{workspace_id}", usage={})
    assert not result.newly_charged and result.micros == 0
    assert counts(sessions, workspace_id) == (0, 0)


def test_a_key_reused_for_another_workspace_is_refused(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    first, second = make_workspace(sessions), make_workspace(sessions)
    key = f"shared-{uuid.uuid4()}"
    billing.charge(first, 1000, idempotency_key=key, usage={})
    with pytest.raises(ValueError, match="belongs to another ledger entry"):
        billing.charge(second, 1000, idempotency_key=key, usage={})
    assert counts(sessions, second) == (0, 0)


def test_unknown_workspace_is_a_clear_error(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    with pytest.raises(UnknownWorkspaceError, match="workspace 987654 does not exist"):
        billing.charge(987654, 1000, idempotency_key="x", usage={})


def test_eight_concurrent_workers_charging_one_key_debit_once(postgres_engine):
    sessions = session_factory(postgres_engine)
    workspace_id = make_workspace(sessions)
    Billing(sessions, enabled=True, micros_per_crawl=1000).grant(workspace_id, 100_000)
    key = f"run-concurrent:{workspace_id}"
    barrier = threading.Barrier(8)
    results, errors = [], []

    def worker() -> None:
        # Each worker gets its own Billing and connection, as separate run workers would.
        billing = Billing(session_factory(postgres_engine), enabled=True, micros_per_crawl=1000)
        barrier.wait()
        try:
            results.append(billing.charge(workspace_id, 7000, idempotency_key=key, usage={"n": 7}))
        except Exception as exc:  # collected so the assertion shows it
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(result.newly_charged for result in results) == 1
    assert {result.micros for result in results} == {7000}
    assert counts(sessions, workspace_id) == (1, 1)
    assert Billing(sessions, enabled=True, micros_per_crawl=1000).balance(workspace_id) == 93_000
