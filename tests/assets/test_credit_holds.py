"""Credit holds through real runs: concurrent runs never overdraw, and a run already paid for is never refused.

Concurrent runs run in processes of their own, as deployed runs do: Dagster's in-process execution
reconfigures logging per run, which runs in threads of one process deadlock on.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import time
import uuid
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from pipelines_dagster import services
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import CreditHold, CreditLedgerEntry
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.ledger.billing import Billing
from tests.assets.conftest import (
    Stack,
    code_location_job,
    fail_once_after_the_charge,
    failure_message,
    materialization,
    rebuilt_resources,
)
from tests.support import ledger
from tests.support.web import page

PIPELINES, AFFORDED, URLS = 8, 3, 5
# Eight processes starting Dagster on two cores, then three 5-page crawls.
RUNS_DONE_WITHIN_SECONDS = 180


def one_workspace_with_pipelines(stack: Stack, count: int, urls: int) -> tuple[int, list[int]]:
    """A workspace with `count` pipelines, each over `urls` slow pages of its own (paths /w{n}/...)."""
    with transaction(stack.sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id=f"u-{uuid.uuid4().hex[:6]}").workspace
        pipeline_ids = []
        for n in range(count):
            paths = [f"/w{n}/{m}" for m in range(urls)]
            for path in paths:
                stack.web.route(path, page(f"Page {path}", f"Text of {path}.", delay=0.3))
            connector = create_connector(
                session, workspace_id=workspace.id, connector_type="webcrawler", urls=[stack.web.url(p) for p in paths]
            )
            pipeline = services.create_pipeline(
                session, stack.instance, workspace_id=workspace.id, connector_id=connector.id, name=f"p{n}"
            )
            pipeline_ids.append(pipeline.id)
        return workspace.id, pipeline_ids


def open_holds(stack: Stack, workspace_id: int) -> int:
    return len(ledger.holds(stack.sessions, workspace_id, CreditHold.id, status="open"))


def run_in_a_process_of_its_own(
    instance_ref: InstanceRef,
    resources: dict[str, tuple[type, dict[str, Any]]],
    pipeline_id: int,
    key: str,
    workspace_id: int,
    start: Barrier,
    results: Queue,
) -> None:
    """One pipeline's run in a process of its own, as every run is deployed: (pipeline id, success, failure)."""
    from pipelines_dagster.assets.crawl_results import crawl_results
    from pipelines_dagster.assets.kb_documents import kb_documents
    from pipelines_dagster.runs import run_tags

    with dg.DagsterInstance.from_ref(instance_ref) as instance:
        start.wait()
        result = dg.materialize(
            [crawl_results, kb_documents],
            partition_key=key,
            instance=instance,
            resources=rebuilt_resources(resources),
            tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
            raise_on_error=False,
        )
        charged = materialization(result, "crawl_results")["charged_micros"] if result.success else None
        results.put((pipeline_id, result.success, None if result.success else failure_message(result), charged))


def test_eight_pipelines_started_at_once_against_credit_for_three_never_overdraw(stack: Stack):
    stack.billing_enabled = True
    workspace_id, pipeline_ids = one_workspace_with_pipelines(stack, PIPELINES, URLS)
    billing = Billing(stack.sessions, enabled=True, micros_per_crawl=stack.micros_per_crawl)
    billing.grant(workspace_id, AFFORDED * URLS * stack.micros_per_crawl)
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(PIPELINES), spawn.Queue()
    runs = [
        spawn.Process(
            target=run_in_a_process_of_its_own,
            args=(
                stack.instance.get_ref(),
                stack.portable_resources(),
                pipeline_id,
                stack.key(pipeline_id),
                workspace_id,
                start,
                results,
            ),
        )
        for pipeline_id in pipeline_ids
    ]
    for run in runs:
        run.start()
    balances, outcomes = [], {}
    deadline = time.monotonic() + RUNS_DONE_WITHIN_SECONDS
    # Read as they come: a process that has put its outcome exits only once it has been read.
    while len(outcomes) < PIPELINES and time.monotonic() < deadline:
        balances.append(billing.balance(workspace_id))
        with contextlib.suppress(queue.Empty):
            pipeline_id, *outcome = results.get(timeout=0.05)
            outcomes[pipeline_id] = outcome
    for run in runs:
        run.join(timeout=10)
    assert len(outcomes) == PIPELINES, f"only {len(outcomes)} of {PIPELINES} runs ended"

    crawled = [n for n, pipeline_id in enumerate(pipeline_ids) if outcomes[pipeline_id][0]]
    refused = [n for n in range(PIPELINES) if n not in crawled]
    assert len(crawled) == AFFORDED, outcomes
    for n in refused:
        assert "out of crawl credit" in outcomes[pipeline_ids[n]][1]
        # Refused before any request.
        assert all(stack.web.hits(f"/w{n}/{m}") == 0 for m in range(URLS))
    assert all(outcomes[pipeline_ids[n]][2] == URLS * 1000 for n in crawled)
    assert min([*balances, billing.balance(workspace_id)]) >= 0
    assert billing.balance(workspace_id) == 0
    assert open_holds(stack, workspace_id) == 0
    assert ledger.charges(stack.sessions, workspace_id, CreditLedgerEntry.delta_micros) == [-URLS * 1000] * AFFORDED


def test_a_step_retry_of_a_paid_crawl_runs_on_a_zero_balance_and_is_not_charged_again(stack: Stack, monkeypatch):
    stack.billing_enabled = True
    workspace_id, pipeline_id = stack.pipeline(stack.site(3), credit=3000)
    calls = fail_once_after_the_charge(monkeypatch)
    result = stack.run(pipeline_id, workspace_id)
    assert result.success, failure_message(result)
    # The first attempt charged everything there was; the retry was neither refused nor charged.
    assert calls == [True, False]
    assert Billing(stack.sessions, enabled=True, micros_per_crawl=1000).balance(workspace_id) == 0
    assert stack.charges(workspace_id) == (1, 1)
    assert open_holds(stack, workspace_id) == 0


def test_a_reexecution_of_a_paid_run_runs_on_a_zero_balance_and_is_not_charged_again(
    embedded: Stack, monkeypatch, tmp_path
):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2), credit=2000)
    job = code_location_job(embedded, monkeypatch, tmp_path)
    tags = {"dagster/partition": embedded.key(pipeline_id), "pipeline_id": str(pipeline_id)}
    with dg.execute_job(job, embedded.instance, tags=tags) as first:
        assert first.success
    billing = Billing(embedded.sessions, enabled=True, micros_per_crawl=1000)
    assert billing.balance(workspace_id) == 0
    options = dg.ReexecutionOptions(parent_run_id=first.run_id, step_selection=["crawl_results"])
    with dg.execute_job(job, embedded.instance, tags=tags, reexecution_options=options) as again:
        assert again.success
    assert embedded.web.hits("/p0") == 2
    assert billing.balance(workspace_id) == 0
    assert embedded.charges(workspace_id) == (1, 1)
    assert open_holds(embedded, workspace_id) == 0
