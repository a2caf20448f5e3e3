"""Honest costs through real runs: a history with a step retry, a run that failed after charging and a
re-execution of it; each run's new charge, summed, is the ledger, and so are the totals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.agent_tools import build_cost_tools
from pipelines_dagster.api.schemas.costs import CostTotalsOut
from pipelines_dagster.app_db.engine import session_factory, transaction
from pipelines_dagster.app_db.models import CreditAccount, CreditLedgerEntry
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.core.ledger.costs import cost_totals
from tests.assets.conftest import Stack, code_location_job, embedded, fail_once_after_the_charge, set_pipeline, web  # noqa: F401  (fixtures)
from tests.test_cli import cli, workspace  # noqa: F401  (fixtures)
from tests.test_history import add_pipeline, history


def ledger_charges(stack: Stack, workspace_id: int) -> int:
    with stack.sessions() as session:
        return -session.scalar(
            sa.select(sa.func.coalesce(sa.func.sum(CreditLedgerEntry.delta_micros), 0))
            .join(CreditAccount, CreditAccount.id == CreditLedgerEntry.account_id)
            .where(CreditAccount.workspace_id == workspace_id, CreditLedgerEntry.kind == "charge")
        )


def test_new_charges_summed_over_a_history_of_retries_and_re_executions_are_the_ledger(
    embedded: Stack, monkeypatch, tmp_path
):
    embedded.billing_enabled = True
    workspace_id, retried = embedded.pipeline(embedded.site(2), credit=100_000)
    # A step retry: the crawl charges, fails, and its second attempt finds the charge made.
    attempts = fail_once_after_the_charge(monkeypatch)
    set_pipeline(embedded, retried, retry_delay_seconds=0.01)
    first = embedded.run(retried, workspace_id)
    assert first.success and attempts == [True, False]
    monkeypatch.undo()

    # A run that charges and fails for good, then re-executed from the UI (as Dagster's run retries do).
    failing = add_pipeline(embedded, workspace_id, embedded.site(3, prefix="/f"), name="failing")
    set_pipeline(embedded, failing, retry_max=0)
    import pipelines_dagster.assets.crawl_results as module

    def broken(report):
        raise OSError("disk full, after the charge")

    real = module._failed_urls_table
    monkeypatch.setattr(module, "_failed_urls_table", broken)
    job = code_location_job(embedded, monkeypatch, tmp_path)
    tags = {"dagster/partition": embedded.key(failing), "pipeline_id": str(failing), "workspace_id": str(workspace_id)}
    with dg.execute_job(job, embedded.instance, tags=tags) as failed:
        assert not failed.success
        failed_id = failed.run_id
    monkeypatch.setattr(module, "_failed_urls_table", real)
    options = dg.ReexecutionOptions(parent_run_id=failed_id, step_selection=["crawl_results"])
    with dg.execute_job(job, embedded.instance, tags=tags, reexecution_options=options) as again:
        assert again.success
        again_id = again.run_id

    runs = {run.run_id: run for run in history(embedded).list_runs(workspace_id, limit=100).runs}
    charges = {run_id: (run.charged_micros, run.new_charge_micros) for run_id, run in runs.items()}
    assert charges == {first.run_id: (2000, 2000), failed_id: (3000, 3000), again_id: (3000, 0)}
    assert sum(run.new_charge_micros for run in runs.values()) == ledger_charges(embedded, workspace_id) == 5000
    assert history(embedded).get_run(workspace_id, again_id).new_charge_micros == 0

    with embedded.sessions() as session:
        totals = cost_totals(session, workspace_id=workspace_id)
        assert (totals.micros, totals.charges) == (5000, 2)
        assert [(cost.pipeline_id, cost.pipeline_name, cost.micros) for cost in totals.pipelines] == [
            (failing, "failing", 3000),
            (retried, "p", 2000),
        ]
        only = cost_totals(session, workspace_id=workspace_id, pipeline_id=retried)
        assert (only.micros, [cost.pipeline_id for cost in only.pipelines]) == (2000, [retried])
        later = datetime.now(UTC) + timedelta(minutes=1)
        assert cost_totals(session, workspace_id=workspace_id, since=later).micros == 0
        assert cost_totals(session, workspace_id=workspace_id, until=later).micros == 5000
        with pytest.raises(InvalidInputError, match="since: must be before until"):
            cost_totals(session, workspace_id=workspace_id, since=later, until=later - timedelta(days=1))


def test_the_cli_and_the_chat_tool_show_the_ledgers_totals_of_their_workspace_only(cli, workspace):
    sessions = session_factory(cli.engine())
    with transaction(sessions) as session:
        docs = create_pipeline(session, workspace_id=workspace["id"], connector_id=None, name="docs").id
        other = create_workspace(session, name="Other", owner_user_id="user-2").workspace.id
    billing = Billing(sessions, enabled=True, micros_per_crawl=1000)
    for workspace_id, micros, key in ((workspace["id"], 3000, "a"), (workspace["id"], 2000, "b"), (other, 7000, "c")):
        billing.charge(workspace_id, micros, idempotency_key=key, usage={"pipeline_id": docs, "run_id": key})

    shown = cli.json("costs", "--workspace", str(workspace["id"]))
    # The API's model of GET .../costs, as every --json prints the API's models.
    assert shown == CostTotalsOut.model_validate(shown).model_dump(mode="json")
    assert (shown["since"], shown["until"], shown["micros"], shown["charges"]) == (None, None, 5000, 2)
    assert [(p["pipeline_id"], p["pipeline_name"], p["micros"]) for p in shown["pipelines"]] == [(docs, "docs", 5000)]
    text = cli("costs", "--workspace", str(workspace["id"]), "--since", "2020-01-01").output
    assert text.splitlines() == ["5000 micro-credits in 2 charges", f"{docs}\tdocs\t5000\t2 charges"]
    future = cli.json("costs", "--workspace", str(workspace["id"]), "--since", "2999-01-01T00:00:00Z")
    assert (future["micros"], future["pipelines"]) == (0, [])
    refused = cli("costs", "--workspace", "1", "--since", "soon", ok=False).output
    assert "Invalid value for '--since': give an ISO 8601 date or time" in refused

    [tool] = build_cost_tools(workspace_id=workspace["id"], sessions=sessions)
    assert tool.spec()["function"]["name"] == "get_cost_totals"
    assert tool().splitlines() == [
        "5000 micro-credits in 2 charges from the start to now",
        "docs • 5000 micro-credits • 2 charges",
    ]
    assert tool(since="2999-01-01").startswith("0 micro-credits in 0 charges from 2999-01-01 00:00 UTC")
    assert tool(since="2026-12-02", until="2026-12-01").startswith("Invalid arguments for get_cost_totals: since:")
    assert tool(pipeline_id="7").startswith("Invalid arguments for get_cost_totals: pipeline_id:")
    assert build_cost_tools(workspace_id=None, sessions=sessions) == []
