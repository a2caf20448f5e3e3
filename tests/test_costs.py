"""Honest costs through real runs: a history with a step retry, a run that failed after charging and a
re-execution of it; each run's new charge, summed, is the ledger, and so are the totals."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository

from pipelines_dagster.app_db.models import CreditAccount, CreditLedgerEntry
from pipelines_dagster.core.costs import cost_totals
from pipelines_dagster.core.validation import InvalidInputError
from tests.assets.conftest import Stack, embedded, fail_once_after_the_charge, set_pipeline, web  # noqa: F401
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
    for name, value in {
        "PIPELINES_DATA_DIR": str(tmp_path / "data"),
        "PIPELINES_DATABASE_URL": embedded.url,
        "PIPELINES_BLOB_STORE": str(embedded.blob_store.root),
        "PIPELINES_BILLING_ENABLED": "true",
        "PIPELINES_CRAWLER_ALLOWED_NETWORKS": "127.0.0.1/32",
    }.items():
        monkeypatch.setenv(name, value)
    # The code location reads its settings when imported: imported afresh on this test's.
    monkeypatch.delitem(sys.modules, "pipelines_dagster.definitions", raising=False)
    job = ReconstructableJob(
        ReconstructableRepository.for_module("pipelines_dagster.definitions", "defs"), "pipeline_run"
    )
    tags = {"dagster/partition": str(failing), "pipeline_id": str(failing), "workspace_id": str(workspace_id)}
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
        assert cost_totals(session, workspace_id=workspace_id, start=later).micros == 0
        assert cost_totals(session, workspace_id=workspace_id, end=later).micros == 5000
        with pytest.raises(InvalidInputError, match="start: must be before end"):
            cost_totals(session, workspace_id=workspace_id, start=later, end=later - timedelta(days=1))
