"""`pipelines-dagster credits` and `costs`: a workspace's crawl credit, and what its crawls were charged."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from pipelines_dagster.api.schemas.costs import CostTotalsOut
from pipelines_dagster.api.schemas.credits import CreditsGrantOut, CreditsOut
from pipelines_dagster.cli.common import ID, emit, json_option, open_sessions, plural, user_errors
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.core.ledger.costs import cost_totals
from pipelines_dagster.settings import load_settings


@click.group()
def credits() -> None:
    """Crawl credit of a workspace."""


def _billing() -> Billing:
    settings = load_settings()
    return Billing(
        open_sessions(settings), enabled=settings.billing_enabled, micros_per_crawl=settings.micros_per_crawl
    )


@credits.command("grant")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--micros", required=True, type=click.IntRange(min=1), help="Micro-credits to add.")
@json_option
@user_errors
def credits_grant(workspace_id: int, micros: int, as_json: bool) -> None:
    """Add crawl credit to a workspace's account."""
    balance = _billing().grant(workspace_id, micros)
    emit(
        as_json,
        CreditsGrantOut(workspace_id=workspace_id, granted_micros=micros, balance_micros=balance),
        f"workspace {workspace_id} balance: {balance} micros",
    )


@credits.command("show")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@json_option
@user_errors
def credits_show(workspace_id: int, as_json: bool) -> None:
    """A workspace's balance, what crawls under way hold of it, and what is available to new runs."""
    billing = _billing()
    shown = CreditsOut.of(billing.summary(workspace_id), billing_enabled=billing.enabled)
    off = "" if shown.billing_enabled else " (billing is off: crawls are not charged)"
    emit(
        as_json,
        shown,
        f"workspace {workspace_id}: {shown.balance_micros} micros balance, {shown.held_micros} held by crawls under "
        f"way, {shown.available_micros} available{off}",
    )


def _moment(context: click.Context, parameter: click.Parameter, value: str | None) -> datetime | None:
    """An ISO 8601 date or time option, in UTC when it names no offset."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter("give an ISO 8601 date or time, e.g. 2026-11-01 or 2026-11-01T09:00:00Z") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


@click.command("costs")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--pipeline", "pipeline_id", default=None, type=ID, help="Only this pipeline's charges.")
@click.option("--since", default=None, callback=_moment, help="From this date or time (ISO 8601, UTC), included.")
@click.option("--until", default=None, callback=_moment, help="Up to this date or time, excluded; default now.")
@json_option
@user_errors
def costs(
    workspace_id: int, pipeline_id: int | None, since: datetime | None, until: datetime | None, as_json: bool
) -> None:
    """What the workspace's crawls were charged, from the ledger: the total and one line per pipeline."""
    with open_sessions(load_settings())() as session:
        get_workspace(session, workspace_id)
        if pipeline_id is not None:
            get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        totals = cost_totals(session, workspace_id=workspace_id, since=since, until=until, pipeline_id=pipeline_id)
    lines = [f"{totals.micros} micro-credits in {plural(totals.charges, 'charge')}"]
    lines += [
        f"{cost.pipeline_id or '-'}\t{cost.pipeline_name or '(deleted)'}\t{cost.micros}\t"
        + plural(cost.charges, "charge")
        for cost in totals.pipelines
    ]
    emit(as_json, CostTotalsOut.of(totals), "\n".join(lines))
