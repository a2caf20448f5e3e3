"""What crawls cost, read from the ledger, the one record of what was charged.

A crawl is charged once per root run and partition (`crawl_charge_key`): a retried step, a run
Dagster retried and a re-execution all share their root run's charge, and only the run that made
it charged anything new. So a run's `new` charge is the ledger entry its own run made (0 when it
found the charge already there), and its `shared` charge is its root run's; summing `new` over
a history counts each charge once, as the totals here do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import CreditAccount, CreditLedgerEntry, LedgerKind, Pipeline, TokenUsage
from pipelines_dagster.core.errors import InvalidInputError


def crawl_charge_key(root_run_id: str, pipeline_id: int) -> str:
    """The idempotency key of a pipeline's crawl charge in a run: its root run's, so it is made once. (Made
    when partition keys were bare ids, under the same `crawl:<root run>:<pipeline id>`.)"""
    return f"crawl:{root_run_id}:{pipeline_id}"


@dataclass(frozen=True, kw_only=True)
class RunCharge:
    shared_micros: int
    """The charge under the run's root run and pipeline, whichever run made it."""
    new_micros: int
    """What this run itself charged: the shared charge when it made it, else 0."""


@dataclass(frozen=True, kw_only=True)
class ChargedRun:
    """A run of one pipeline, as the ledger knows it: its id, its root run's id, the pipeline."""

    run_id: str
    root_run_id: str
    pipeline_id: int


def run_charges(session: Session, runs: Iterable[ChargedRun]) -> dict[tuple[str, int], RunCharge]:
    """Each run's charges by (run id, pipeline id); a run whose crawl charged nothing (billing off, or
    it never crawled) is absent. One indexed query for all of them."""
    wanted: dict[str, list[ChargedRun]] = {}
    for run in runs:
        wanted.setdefault(crawl_charge_key(run.root_run_id, run.pipeline_id), []).append(run)
    if not wanted:
        return {}
    rows = session.execute(
        sa.select(CreditLedgerEntry.idempotency_key, CreditLedgerEntry.delta_micros, TokenUsage.call_details)
        .outerjoin(TokenUsage, TokenUsage.ledger_entry_id == CreditLedgerEntry.id)
        .where(CreditLedgerEntry.idempotency_key.in_(wanted), CreditLedgerEntry.kind == LedgerKind.CHARGE.value)
    ).all()
    charges = {}
    for key, delta, details in rows:
        maker = (details or {}).get("run_id")
        for run in wanted[key]:
            charges[run.run_id, run.pipeline_id] = RunCharge(
                shared_micros=-delta, new_micros=-delta if maker == run.run_id else 0
            )
    return charges


@dataclass(frozen=True, kw_only=True)
class PipelineCost:
    pipeline_id: int | None
    """None for charges whose pipeline the ledger does not name."""
    pipeline_name: str | None
    """None when the pipeline has been deleted since."""
    micros: int
    charges: int


@dataclass(frozen=True, kw_only=True)
class CostTotals:
    workspace_id: int
    since: datetime | None
    until: datetime | None
    micros: int
    """Every crawl charge in [since, until): the ledger's own sum."""
    charges: int
    pipelines: list[PipelineCost] = field(default_factory=list)
    """The same charges by pipeline, dearest first; they add up to `micros`."""


def cost_totals(
    session: Session,
    *,
    workspace_id: int,
    since: datetime | None = None,
    until: datetime | None = None,
    pipeline_id: int | None = None,
) -> CostTotals:
    """What the workspace's crawls were charged from `since` (included) to `until` (excluded), in all
    and by pipeline (only `pipeline_id`'s, when given)."""
    if since is not None and until is not None and since >= until:
        raise InvalidInputError("since", f"must be before until ({until.isoformat()})")
    pipeline = TokenUsage.call_details["pipeline_id"].as_integer()
    query = (
        sa.select(pipeline, sa.func.sum(-CreditLedgerEntry.delta_micros), sa.func.count())
        .select_from(CreditLedgerEntry)
        .join(CreditAccount, CreditAccount.id == CreditLedgerEntry.account_id)
        .outerjoin(TokenUsage, TokenUsage.ledger_entry_id == CreditLedgerEntry.id)
        .where(CreditAccount.workspace_id == workspace_id, CreditLedgerEntry.kind == LedgerKind.CHARGE.value)
        .group_by(pipeline)
    )
    if since is not None:
        query = query.where(CreditLedgerEntry.created_at >= since)
    if until is not None:
        query = query.where(CreditLedgerEntry.created_at < until)
    if pipeline_id is not None:
        query = query.where(pipeline == pipeline_id)
    rows = session.execute(query).all()
    charged = [pid for pid, _, _ in rows if pid is not None]
    names = dict(
        session.execute(
            sa.select(Pipeline.id, Pipeline.name).where(Pipeline.workspace_id == workspace_id, Pipeline.id.in_(charged))
        ).all()
    )
    pipelines = sorted(
        (
            PipelineCost(pipeline_id=pid, pipeline_name=names.get(pid), micros=int(micros), charges=count)
            for pid, micros, count in rows
        ),
        key=lambda cost: (-cost.micros, cost.pipeline_id or 0),
    )
    return CostTotals(
        workspace_id=workspace_id,
        since=since,
        until=until,
        micros=sum(cost.micros for cost in pipelines),
        charges=sum(cost.charges for cost in pipelines),
        pipelines=pipelines,
    )
