"""crawl_results + kb_documents through a real Dagster instance, app DB, blob store and loopback site."""

from __future__ import annotations

import threading
import time

import dagster as dg
import pytest
import sqlalchemy as sa

import pipelines_dagster.assets.crawl_results as crawl_results_module
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, Folder, Pipeline
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.core.storage.locks import connector_lock_name, pipeline_lock_name
from pipelines_dagster.history import RunHistory
from pipelines_dagster.partitions import PARTITIONS_NAME
from pipelines_dagster.runs import run_tags
from tests.assets.conftest import (
    Stack,
    code_location_job,
    fail_once_after_the_charge,
    failure_message,
    materialization,
    set_pipeline,
)
from tests.support.web import page


def test_kb_run_lands_documents_in_the_destination_folder(stack: Stack):
    urls = stack.site(5)
    workspace_id, pipeline_id = stack.pipeline([*urls, stack.web.url("/missing")])
    result = stack.run(pipeline_id, workspace_id)
    assert result.success
    crawl = materialization(result, "crawl_results")
    assert (crawl["urls_attempted"], crawl["urls_succeeded"], crawl["urls_failed"]) == (6, 5, 1)
    failed = [(row.data["url"], row.data["reason"]) for row in crawl["failed_urls"].records]
    assert failed == [(stack.web.url("/missing"), "HTTP 404")]
    kb = materialization(result, "kb_documents")
    assert (kb["documents_created"], kb["documents_failed"]) == (5, 1)
    with stack.sessions() as session:
        folder = session.scalars(sa.select(Folder).where(Folder.workspace_id == workspace_id)).one()
    documents = stack.documents(workspace_id)
    ready = [d for d in documents if d.status_state == "ready"]
    assert len(ready) == 5 and {d.folder_id for d in ready} == {folder.id}
    assert {d.title for d in ready} == {f"Page {n}" for n in range(5)}
    assert all("Paragraph about topic" in d.content for d in ready)
    blob = list(stack.blob.read_jsonl(crawl["blob_key"]))
    assert len(blob) == 6 and crawl["blob_key"].endswith(f"/{pipeline_id}/{result.run_id}/result.jsonl")
    assert not stack.locks.is_locked(pipeline_lock_name(pipeline_id))


def test_non_kb_run_keeps_only_the_blob_and_bills_like_a_kb_run(stack: Stack):
    stack.billing_enabled = True
    urls = stack.site(4)
    kb_ws, kb_pipeline = stack.pipeline(urls, credit=100_000)
    raw_ws, raw_pipeline = stack.pipeline(urls, save_to_kb=False, folder=None, credit=100_000)
    kb_result = stack.run(kb_pipeline, kb_ws)
    raw_result = stack.run(raw_pipeline, raw_ws)
    assert kb_result.success and raw_result.success
    assert raw_result.asset_materializations_for_node("kb_documents") == []
    raw = materialization(raw_result, "crawl_results")
    assert "save to KB is off" in raw["kb_documents"]
    assert stack.documents(raw_ws) == []
    records = list(stack.blob.read_jsonl(raw["blob_key"]))
    assert [r["status"] for r in records] == ["success"] * 4
    assert all(r["content"] for r in records)
    assert raw["charged_micros"] == materialization(kb_result, "crawl_results")["charged_micros"] == 4000
    billing = Billing(stack.sessions, enabled=True, micros_per_crawl=1000)
    assert billing.balance(raw_ws) == billing.balance(kb_ws) == 96_000
    assert stack.charges(raw_ws) == stack.charges(kb_ws) == (1, 1)


def test_insufficient_credit_fails_before_any_request(embedded: Stack):
    embedded.billing_enabled = True
    urls = embedded.site(3)
    workspace_id, pipeline_id = embedded.pipeline(urls, credit=2999)
    result = embedded.run(pipeline_id, workspace_id)
    assert not result.success
    assert "out of crawl credit" in failure_message(result)
    assert embedded.web.requests == []
    assert Billing(embedded.sessions, enabled=True, micros_per_crawl=1000).balance(workspace_id) == 2999
    assert embedded.charges(workspace_id) == (0, 0)
    assert not embedded.locks.is_locked(pipeline_lock_name(pipeline_id))


def test_disabled_billing_charges_nothing(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2))
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success and materialization(result, "crawl_results")["charged_micros"] == 0
    assert embedded.charges(workspace_id) == (0, 0)


def test_a_retried_step_charges_once(embedded: Stack, monkeypatch):
    """The first attempt charges, then fails after the charge; the retry finds the key charged."""
    embedded.billing_enabled = True
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(3), credit=10_000)
    calls = fail_once_after_the_charge(monkeypatch)
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success
    assert calls == [True, False]
    assert materialization(result, "crawl_results")["charged_micros"] == 3000
    assert Billing(embedded.sessions, enabled=True, micros_per_crawl=1000).balance(workspace_id) == 7000
    assert embedded.charges(workspace_id) == (1, 1)


def assert_refused(
    stack: Stack, workspace_id: int, pipeline_id: int, message: str, *, ours_to_free: bool = True
) -> None:
    result = stack.run(pipeline_id, workspace_id)
    assert not result.success
    assert message in failure_message(result)
    # Guard failures are final: no retry of the step.
    assert not [event for event in result.all_events if event.event_type_value == "STEP_UP_FOR_RETRY"]
    assert stack.web.requests == []
    if ours_to_free:
        assert not stack.locks.is_locked(pipeline_lock_name(pipeline_id))
    assert stack.charges(workspace_id) == (0, 0)


def test_a_disabled_pipeline_is_refused(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1), enabled=False)
    assert_refused(embedded, workspace_id, pipeline_id, f"pipeline {pipeline_id} is disabled")


def test_an_uploads_pipeline_has_no_fetch_executor(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    set_pipeline(embedded, pipeline_id, connector_id=None)
    assert_refused(embedded, workspace_id, pipeline_id, "uploads pipeline has no fetch executor")


def test_a_connector_type_without_executor_is_refused(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    with transaction(embedded.sessions) as session:
        connector = session.get(Connector, session.get(Pipeline, pipeline_id).connector_id)
        connector.connector_type = "google_drive"
    assert_refused(embedded, workspace_id, pipeline_id, "executor not implemented for google_drive")


def test_a_connector_type_that_became_ineligible_fails_the_run_cleanly(embedded: Stack, monkeypatch):
    from pipelines_dagster.core.catalog import connector_types

    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    # A deploy after the pipeline was created moved its connector type to a new implementation.
    monkeypatch.setitem(connector_types.PIPELINE_AVAILABILITY, "webcrawler", connector_types.Availability.MIGRATING)
    assert_refused(
        embedded,
        workspace_id,
        pipeline_id,
        "connector type webcrawler is migrating and is not eligible for pipelines any more",
    )


def test_no_urls_is_refused(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    with transaction(embedded.sessions) as session:
        connector = session.get(Connector, session.get(Pipeline, pipeline_id).connector_id)
        connector.config = {"INITIAL_URLS": []}
    assert_refused(embedded, workspace_id, pipeline_id, "no URLs to crawl")


def test_a_partition_added_by_hand_is_refused_by_name_and_not_retried(embedded: Stack):
    embedded.instance.add_dynamic_partitions(PARTITIONS_NAME, ["docs-site"])
    result = dg.materialize(
        [crawl_results_module.crawl_results],
        partition_key="docs-site",
        instance=embedded.instance,
        resources=embedded.resources(),
        raise_on_error=False,
    )
    assert not result.success
    assert "partition 'docs-site' is not a pipeline" in failure_message(result)
    assert not [event for event in result.all_events if event.event_type_value == "STEP_UP_FOR_RETRY"]


def test_a_key_that_only_starts_with_a_pipelines_id_is_refused_naming_the_pipelines_own(embedded: Stack):
    """A key added by hand in the UI (the bare id of a pipeline whose key carries its name) runs nothing."""
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    own = embedded.key(pipeline_id)
    assert own == f"{pipeline_id}-p"
    for foreign in (str(pipeline_id), f"{pipeline_id}-other-name"):
        embedded.instance.add_dynamic_partitions(PARTITIONS_NAME, [foreign])
        for asset in (crawl_results_module.crawl_results, kb_documents):
            result = dg.materialize(
                [asset],
                partition_key=foreign,
                instance=embedded.instance,
                resources=embedded.resources(),
                tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
                raise_on_error=False,
            )
            assert not result.success
            assert f"partition '{foreign}' is not pipeline {pipeline_id}'s: its partition is '{own}'" in (
                failure_message(result)
            )
    assert embedded.charges(workspace_id) == (0, 0) and not embedded.documents(workspace_id)


def test_a_pipeline_made_before_keys_carried_names_runs_under_its_bare_id(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2))
    with transaction(embedded.sessions) as session:
        session.get_one(Pipeline, pipeline_id).partition_key = None
    embedded.keep_partition(pipeline_id)
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success, failure_message(result)
    assert result.dagster_run.tags["dagster/partition"] == str(pipeline_id)
    assert len(embedded.documents(workspace_id)) == 2
    # Run history reads its crawl under that key.
    [listed] = RunHistory(embedded.instance, embedded.sessions).list_runs(workspace_id, pipeline_id=pipeline_id).runs
    assert (listed.run_id, listed.status, listed.crawls_attempted) == (result.run_id, "succeeded", 2)


def test_a_second_run_while_one_holds_the_lock_fails_already_in_progress(stack: Stack):
    workspace_id, pipeline_id = stack.pipeline(stack.site(1))
    stack.locks.acquire(pipeline_lock_name(pipeline_id), "another-run", ttl_seconds=60)
    assert_refused(
        stack, workspace_id, pipeline_id, "a run for this pipeline is already in progress", ours_to_free=False
    )
    assert stack.locks.owner_of(pipeline_lock_name(pipeline_id)) == "another-run"


def test_locks_left_by_a_run_whose_process_died_are_taken_over_once_dagster_ends_it(stack: Stack, monkeypatch):
    """A run killed mid-crawl never releases its locks. The lock-release sensor frees them on its next
    tick; a run started before that (a relaunch, the instance's retry) must not be refused meanwhile."""
    monkeypatch.setattr(crawl_results_module, "LOCK_WAIT_SECONDS", 0.0)
    workspace_id, pipeline_id = stack.pipeline(stack.site(1))
    with stack.sessions() as session:
        connector_id = session.get(Pipeline, pipeline_id).connector_id
    dead = stack.instance.add_run(dg.DagsterRun(job_name="pipeline_run", status=dg.DagsterRunStatus.STARTED))
    names = [pipeline_lock_name(pipeline_id), connector_lock_name(connector_id)]
    for name in names:
        stack.locks.acquire(name, dead.run_id, ttl_seconds=600)
    # While Dagster still has it running, its locks are its own.
    assert_refused(
        stack, workspace_id, pipeline_id, "a run for this pipeline is already in progress", ours_to_free=False
    )
    stack.instance.report_run_failed(dead)
    assert stack.run(pipeline_id, workspace_id).success
    assert [stack.locks.owner_of(name) for name in names] == [None, None]


def test_a_busy_connector_is_refused_and_the_pipeline_lock_released(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    with embedded.sessions() as session:
        connector_id = session.get(Pipeline, pipeline_id).connector_id
    embedded.locks.acquire(connector_lock_name(connector_id), "connector-indexing", ttl_seconds=60)
    assert_refused(embedded, workspace_id, pipeline_id, "connector is currently indexing; retry later")
    assert embedded.locks.owner_of(connector_lock_name(connector_id)) == "connector-indexing"


def test_kb_documents_alone_reindexes_from_the_blob(embedded: Stack):
    embedded.billing_enabled = True
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(3), credit=10_000)
    assert embedded.run(pipeline_id, workspace_id).success
    requests = len(embedded.web.requests)
    with transaction(embedded.sessions) as session:
        for document in embedded.documents(workspace_id):
            session.delete(session.merge(document))
    result = embedded.run(pipeline_id, workspace_id, assets=[kb_documents])
    assert result.success
    assert materialization(result, "kb_documents")["documents_created"] == 3
    assert len(embedded.web.requests) == requests
    assert embedded.charges(workspace_id) == (1, 1)
    assert len(embedded.documents(workspace_id)) == 3


def test_an_unchanged_recrawl_reuses_stored_content(embedded: Stack):
    embedded.web.route("/doc", page("Doc", "Stable text.", headers={"ETag": '"v1"'}))
    workspace_id, pipeline_id = embedded.pipeline([embedded.web.url("/doc")])
    assert embedded.run(pipeline_id, workspace_id).success
    second = embedded.run(pipeline_id, workspace_id)
    crawl = materialization(second, "crawl_results")
    assert crawl["urls_unchanged"] == 1
    [record] = list(embedded.blob.read_jsonl(crawl["blob_key"]))
    assert record["unchanged"] and "Stable text." in record["content"]
    assert embedded.web.requests[-1].headers.get("if-none-match") == '"v1"'
    assert materialization(second, "kb_documents")["documents_unchanged"] == 1


def test_a_concurrent_second_run_waits_for_the_first_and_crawls_after_it(embedded: Stack):
    """Two runs of one pipeline the run queue did not keep apart (a batch covering it, a trigger's run
    requested in the same moment): the second waits for the first's lock, then crawls."""
    embedded.web.route("/slow", page("Slow", "Takes a while.", delay=2.5))
    workspace_id, pipeline_id = embedded.pipeline([embedded.web.url("/slow")])
    first: list = []
    runner = threading.Thread(target=lambda: first.append(embedded.run(pipeline_id, workspace_id)))
    runner.start()
    deadline = time.monotonic() + 10
    while embedded.web.hits("/slow") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    second = embedded.run(pipeline_id, workspace_id)
    runner.join()
    assert first[0].success and second.success
    [waited] = [
        entry.user_message
        for entry in embedded.instance.all_logs(second.run_id)
        if "this run crawls when that one ends" in entry.user_message
    ]
    assert first[0].run_id in waited
    # One after the other: the second's request came when the first had its answer.
    assert embedded.web.hits("/slow") == 2
    [one, two] = [request.received_at for request in embedded.web.requests if request.path == "/slow"]
    assert two - one >= 2.5


def test_a_reexecuted_run_does_not_charge_again(embedded: Stack, monkeypatch, tmp_path):
    """Re-execution from the UI makes a new run with the first as root: the charge key is the root's."""
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2), credit=10_000)
    job = code_location_job(embedded, monkeypatch, tmp_path)
    tags = {"dagster/partition": embedded.key(pipeline_id), "pipeline_id": str(pipeline_id)}
    with dg.execute_job(job, embedded.instance, tags=tags) as first:
        assert first.success
    options = dg.ReexecutionOptions(parent_run_id=first.run_id, step_selection=["crawl_results"])
    # The UI copies the parent run's tags onto a re-execution; execute_job leaves that to the caller.
    with dg.execute_job(job, embedded.instance, tags=tags, reexecution_options=options) as again:
        assert again.success
        assert again.dagster_run.root_run_id == first.run_id
        # The re-executed crawl step indexes and records changes itself: the run plans no other step.
        logged = {
            (event.asset_key.to_user_string(), event.step_key) for event in again.get_asset_materialization_events()
        }
        assert logged == {
            ("crawl_results", "crawl_results"),
            ("kb_documents", "crawl_results"),
            ("page_changes", "crawl_results"),
        }
    # Both runs really crawled; only the first charged.
    assert embedded.web.hits("/p0") == embedded.web.hits("/p1") == 2
    assert Billing(embedded.sessions, enabled=True, micros_per_crawl=1000).balance(workspace_id) == 8000
    assert embedded.charges(workspace_id) == (1, 1)


def test_faulty_pages_fail_alone_and_the_run_succeeds(embedded: Stack):
    from pipelines_dagster.resources.crawler import CrawlerResource
    from pipelines_dagster.resources.network import NetworkAccess
    from tests.support.web import Reply, redirect

    web = embedded.web
    embedded.crawler = CrawlerResource(
        network=NetworkAccess(allowed_networks=["127.0.0.1/32"]), max_attempts=2, total_timeout=1, max_body_bytes=50_000
    )
    web.route("/flaky", Reply(status=500, body="oops"), page("Flaky", "Works the second time."))
    web.route(
        "/busy", Reply(status=429, body="slow down", headers={"Retry-After": "1"}), page("Busy", "Worth the wait.")
    )
    web.route("/slow", page("Slow", "Too late.", delay=3))
    web.route("/huge", page("Huge", "x" * 200_000))
    web.route("/loop", redirect("/loop"))
    web.route("/logo.png", Reply(body=b"\x89PNG....", content_type="image/png"))
    web.route(
        "/latin",
        Reply(
            body=b"<html><head><title>Caf\xe9</title></head><body><article><h1>Caf\xe9</h1>"
            b"<p>" + b"Menu du jour \xff\xfe with enough words to extract. " * 20 + b"</p></article></body></html>",
            content_type="text/html; charset=utf-8",
        ),
    )
    names = ["flaky", "busy", "slow", "huge", "loop", "logo.png", "latin"]
    workspace_id, pipeline_id = embedded.pipeline([web.url(f"/{name}") for name in names])
    # 3 of 7 succeed: a healthy crawl only under a threshold this low.
    set_pipeline(embedded, pipeline_id, config={"MIN_SUCCESS_RATIO": 0.4})
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success
    crawl = materialization(result, "crawl_results")
    records = {r["url"].rsplit("/", 1)[1]: r for r in embedded.blob.read_jsonl(crawl["blob_key"])}
    assert {n: records[n]["status"] for n in names} == {
        "flaky": "success",
        "busy": "success",
        "slow": "failed",
        "huge": "failed",
        "loop": "failed",
        "logo.png": "failed",
        "latin": "success",
    }
    assert records["flaky"]["attempts"] == 2 and records["busy"]["elapsed_seconds"] >= 0.9
    assert records["slow"]["error"].startswith("timed out")
    assert records["huge"]["error"].startswith("body larger than 50000 bytes")
    assert records["loop"]["error"] == "too many redirects (more than 5)"
    assert records["logo.png"]["error"].startswith("unsupported content type 'image/png'")
    assert "Menu du jour" in records["latin"]["content"]
    assert (crawl["urls_succeeded"], crawl["urls_failed"]) == (3, 4)
    assert materialization(result, "kb_documents")["documents_created"] == 3


def always_failing_crawl(monkeypatch) -> list[int]:
    """Make every crawl attempt fail after its fetches; the list counts the attempts."""
    import pipelines_dagster.assets.crawl_results as module

    attempts: list[int] = []

    def broken(report):
        attempts.append(1)
        raise ConnectionError("blob store unreachable")

    monkeypatch.setattr(module, "_failed_urls_table", broken)
    return attempts


def retry_waits(result: dg.ExecuteInProcessResult) -> list[float]:
    return [
        event.event_specific_data.seconds_to_wait
        for event in result.all_events
        if event.event_type_value == "STEP_UP_FOR_RETRY"
    ]


@pytest.mark.parametrize(
    ("backoff", "max_retries", "waits"),
    [("linear", 3, [0.05, 0.1, 0.15]), ("exponential", 3, [0.05, 0.1, 0.2]), ("linear", 0, [])],
)
def test_the_crawl_step_retries_under_the_pipelines_own_policy(
    embedded: Stack, monkeypatch, backoff, max_retries, waits
):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    set_pipeline(embedded, pipeline_id, retry_backoff=backoff, retry_max=max_retries, retry_delay_seconds=0.05)
    attempts = always_failing_crawl(monkeypatch)
    result = embedded.run(pipeline_id, workspace_id)
    assert not result.success
    assert retry_waits(result) == pytest.approx(waits) and len(attempts) == max_retries + 1
    # The last failure names the error that stopped the crawl, not only that retries ran out.
    failure = next(event for event in result.all_events if event.is_step_failure).step_failure_data.error
    assert "blob store unreachable" in (failure.cause.message if failure.cause else failure.message)


def test_the_retry_policy_and_attempt_are_shown_with_the_crawl(embedded: Stack, monkeypatch):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    set_pipeline(embedded, pipeline_id, retry_backoff="linear", retry_max=2, retry_delay_seconds=0.05)
    fail_once_after_the_charge(monkeypatch)
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success and retry_waits(result) == [0.05]
    crawl = materialization(result, "crawl_results")
    assert crawl["attempt"] == 2
    assert crawl["retry_policy"] == "linear backoff, up to 2 retries, waiting 0.05, 0.1 s"
