"""Billing: holds, idempotent charges, usage rows; concurrency on real SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import CreditAccount, CreditHold, CreditLedgerEntry, TokenUsage, Workspace
from pipelines_dagster.core.ledger.billing import HOLD_TTL, Billing, InsufficientCreditsError, UnknownWorkspaceError


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


def holds(sessions, workspace_id: int) -> list[tuple[str, int, str]]:
    """(key without its workspace suffix, micros, status) of the workspace's holds, in the order placed."""
    with sessions() as session:
        rows = session.execute(
            sa.select(CreditHold.idempotency_key, CreditHold.micros, CreditHold.status)
            .join(CreditAccount)
            .where(CreditAccount.workspace_id == workspace_id)
            .order_by(CreditHold.id)
        )
        return [(key.split(":")[0], micros, status) for key, micros, status in rows]


def test_reserve_refuses_when_the_balance_less_open_holds_cannot_cover_every_page(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    billing.grant(workspace_id, 5000)
    assert billing.reserve(workspace_id, 3, idempotency_key=f"a:{workspace_id}", run_id="run-a").micros == 3000
    with pytest.raises(
        InsufficientCreditsError,
        match=r"3 pages need 3000 micros .* has 2000 available \(5000 balance, "
        r"3000 held by crawls under way\)",
    ):
        billing.reserve(workspace_id, 3, idempotency_key=f"b:{workspace_id}", run_id="run-b")
    assert billing.reserve(workspace_id, 2, idempotency_key=f"c:{workspace_id}", run_id="run-c").micros == 2000
    assert holds(sessions, workspace_id) == [("a", 3000, "open"), ("c", 2000, "open")]
    summary = billing.summary(workspace_id)
    assert (summary.balance_micros, summary.held_micros, summary.available_micros) == (5000, 5000, 0)


def test_a_charge_settles_its_hold_and_frees_what_it_did_not_spend(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    billing.grant(workspace_id, 5000)
    billing.reserve(workspace_id, 5, idempotency_key=f"a:{workspace_id}", run_id="run-a")
    billing.charge(workspace_id, 2000, idempotency_key=f"a:{workspace_id}", usage={})
    assert holds(sessions, workspace_id) == [("a", 5000, "settled")]
    summary = billing.summary(workspace_id)
    assert (summary.balance_micros, summary.held_micros) == (3000, 0)
    assert billing.reserve(workspace_id, 3, idempotency_key=f"b:{workspace_id}", run_id="run-b").micros == 3000
    # A crawl that succeeded at nothing is charged nothing and gives its whole hold back.
    billing.charge(workspace_id, 0, idempotency_key=f"b:{workspace_id}", usage={})
    assert holds(sessions, workspace_id)[1] == ("b", 3000, "settled")
    assert billing.summary(workspace_id).available_micros == 3000
    assert counts(sessions, workspace_id) == (1, 1)


def test_a_retry_takes_over_its_own_hold_and_a_charged_key_reserves_nothing(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    billing.grant(workspace_id, 3000)
    billing.reserve(workspace_id, 3, idempotency_key=f"root:7:{workspace_id}", run_id="first")
    # The re-execution of the run (same root): its own hold, not a second one, and not refused.
    assert billing.reserve(workspace_id, 3, idempotency_key=f"root:7:{workspace_id}", run_id="second").micros == 3000
    with sessions() as session:
        owners = session.scalars(
            sa.select(CreditHold.run_id).join(CreditAccount).where(CreditAccount.workspace_id == workspace_id)
        )
        assert owners.all() == ["second"]
    assert billing.release_holds("first") == 0
    billing.charge(workspace_id, 3000, idempotency_key=f"root:7:{workspace_id}", usage={})
    assert billing.balance(workspace_id) == 0
    # Paid already: a later retry with nothing left is neither checked nor held.
    assert billing.reserve(workspace_id, 3, idempotency_key=f"root:7:{workspace_id}", run_id="third").paid
    assert holds(sessions, workspace_id) == [("root", 3000, "settled")]


def test_holds_are_released_by_their_runs_end_or_their_expiry(sessions):
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    billing.grant(workspace_id, 4000)
    billing.reserve(workspace_id, 2, idempotency_key=f"a:{workspace_id}", run_id=f"dead-run-{workspace_id}")
    billing.reserve(workspace_id, 2, idempotency_key=f"b:{workspace_id}", run_id="lost-run")
    assert billing.summary(workspace_id).available_micros == 0
    assert billing.release_holds(f"dead-run-{workspace_id}") == 1
    assert billing.summary(workspace_id).available_micros == 2000
    later = datetime.now(UTC) + HOLD_TTL + timedelta(seconds=1)
    # Past its expiry a hold reserves nothing, even before anything closes it.
    assert billing.summary(workspace_id, now=later).available_micros == 4000
    # Other tests' holds in this database expire too: what counts is this workspace's.
    billing.release_expired(now=later)
    assert [status for _, _, status in holds(sessions, workspace_id)] == ["released", "released"]
    # A released hold's key can hold again (a retry of the run after its first attempt's run ended).
    assert billing.reserve(workspace_id, 4, idempotency_key=f"a:{workspace_id}", run_id="retry").micros == 4000


def test_reserve_holds_nothing_when_billing_is_disabled(sessions):
    billing = Billing(sessions, enabled=False, micros_per_crawl=1000)
    workspace_id = make_workspace(sessions)
    assert billing.reserve(workspace_id, 10_000, idempotency_key=f"a:{workspace_id}", run_id="r").micros == 0
    assert holds(sessions, workspace_id) == []


def test_eight_concurrent_reservations_against_credit_for_three_hold_three(app_engine):
    sessions = session_factory(app_engine)
    workspace_id = make_workspace(sessions)
    Billing(sessions, enabled=True, micros_per_crawl=1000).grant(workspace_id, 15_000)
    barrier = threading.Barrier(8)
    reserved, refused = [], []

    def worker(n: int) -> None:
        billing = Billing(session_factory(app_engine), enabled=True, micros_per_crawl=1000)
        barrier.wait()
        try:
            reserved.append(billing.reserve(workspace_id, 5, idempotency_key=f"k{n}:{workspace_id}", run_id=f"r{n}"))
        except InsufficientCreditsError:
            refused.append(n)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(reserved), len(refused)) == (3, 5)
    assert Billing(sessions, enabled=True, micros_per_crawl=1000).summary(workspace_id).available_micros == 0


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
