"""pipeline_batch: many pipelines in one run, each with its own partitions, checks, charge, locks and failure."""

from __future__ import annotations

import dagster as dg
from dagster._utils.tags import is_valid_tag_key

from pipelines_dagster.batch import BatchPipeline, PipelineBatchConfig, pipeline_batch, split_evenly
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.core.storage.locks import pipeline_lock_name
from pipelines_dagster.runs import (
    PIPELINE_BATCH_OP,
    batch_pipeline_ids,
    batch_tags,
    member_workspace_tag,
    pipeline_id_of_partition,
)
from tests.assets.conftest import Stack, fail_once_after_the_charge, set_pipeline


def run_batch(stack: Stack, members: list[tuple[int, int]]) -> dg.ExecuteInProcessResult:
    """pipeline_batch over (workspace id, pipeline id) pairs, as the schedule sensor would request it."""
    config = PipelineBatchConfig(
        pipelines=[
            BatchPipeline(pipeline_id=pipeline_id, workspace_id=workspace_id, partition_key=stack.key(pipeline_id))
            for workspace_id, pipeline_id in members
        ]
    )
    return pipeline_batch.execute_in_process(
        run_config=dg.RunConfig(ops={PIPELINE_BATCH_OP: config}),
        instance=stack.instance,
        resources=stack.resources(),
        tags=batch_tags(((pipeline_id, workspace_id) for workspace_id, pipeline_id in members), trigger="scheduled"),
        raise_on_error=False,
    )


def partition_events(result: dg.ExecuteInProcessResult, pipeline_id: int) -> dict[str, list[dg.DagsterEvent]]:
    """The run's events about one pipeline's partition, by event type (asset events and check results)."""
    events: dict[str, list[dg.DagsterEvent]] = {}
    for event in result.all_events:
        partition = None
        if event.is_step_materialization:
            partition = event.step_materialization_data.materialization.partition
        elif event.event_type_value == "ASSET_OBSERVATION":
            partition = event.asset_observation_data.asset_observation.partition
        elif event.event_type_value == "ASSET_CHECK_EVALUATION":
            partition = event.asset_check_evaluation_data.partition
        if partition is not None and pipeline_id_of_partition(partition) == pipeline_id:
            events.setdefault(event.event_type_value, []).append(event)
    return events


def materialized(events: dict[str, list[dg.DagsterEvent]]) -> dict[str, dict]:
    return {
        event.asset_key.to_user_string(): {
            key: value.value for key, value in event.step_materialization_data.materialization.metadata.items()
        }
        for event in events.get("ASSET_MATERIALIZATION", [])
    }


def checks(events: dict[str, list[dg.DagsterEvent]]) -> dict[str, bool]:
    return {
        event.asset_check_evaluation_data.check_name: event.asset_check_evaluation_data.passed
        for event in events.get("ASSET_CHECK_EVALUATION", [])
    }


def test_each_pipeline_of_a_batch_gets_its_own_partitions_checks_and_charge(stack: Stack):
    stack.billing_enabled = True
    kb_a = stack.pipeline(stack.site(2, prefix="/a"), credit=10_000)
    raw = stack.pipeline(stack.site(3, prefix="/r"), save_to_kb=False, folder=None, credit=10_000)
    kb_b = stack.pipeline(stack.site(1, prefix="/b"), credit=10_000)
    result = run_batch(stack, [kb_a, raw, kb_b])
    assert result.success
    for (workspace_id, pipeline_id), pages, save_to_kb in ((kb_a, 2, True), (raw, 3, False), (kb_b, 1, True)):
        events = partition_events(result, pipeline_id)
        assets = materialized(events)
        assert set(assets) == (
            {"crawl_results", "kb_documents", "page_changes"} if save_to_kb else {"crawl_results", "page_changes"}
        )
        crawl = assets["crawl_results"]
        assert (crawl["pipeline_id"], crawl["urls_attempted"], crawl["urls_succeeded"]) == (
            str(pipeline_id),
            pages,
            pages,
        )
        assert {asset: data["pipeline_name"] for asset, data in assets.items()} == dict.fromkeys(assets, "p")
        assert crawl["blob_key"].endswith(f"/{pipeline_id}/{result.run_id}/result.jsonl")
        assert len(list(stack.blob.read_jsonl(crawl["blob_key"]))) == pages
        assert crawl["charged_micros"] == pages * 1000
        assert assets["page_changes"]["pages_new"] == pages
        expected_checks = {"crawl_success_ratio": True, "crawl_blob_readable": True}
        if save_to_kb:
            assert assets["kb_documents"]["documents_created"] == pages
            expected_checks["kb_documents_have_content"] = True
        assert checks(events) == expected_checks
        assert "ASSET_OBSERVATION" not in events
        assert len([d for d in stack.documents(workspace_id) if d.status_state == "ready"]) == (
            pages if save_to_kb else 0
        )
        assert stack.charges(workspace_id) == (1, 1)
        assert (
            Billing(stack.sessions, enabled=True, micros_per_crawl=1000).balance(workspace_id) == 10_000 - pages * 1000
        )
        assert not stack.locks.is_locked(pipeline_lock_name(pipeline_id))
    # The instance's partition records are each pipeline's own, as after pipeline_run.
    records = stack.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("crawl_results"), asset_partitions=[stack.key(kb_b[1])]), limit=5
    ).records
    assert [record.run_id for record in records] == [result.run_id]


def test_a_failing_pipeline_fails_alone_and_the_run_names_it(stack: Stack):
    stack.billing_enabled = True
    first = stack.pipeline(stack.site(2, prefix="/a"), credit=10_000)
    broke = stack.pipeline(stack.site(2, prefix="/b"), credit=1_500)  # two pages cost 2,000
    last = stack.pipeline(stack.site(1, prefix="/c"), credit=10_000)
    result = run_batch(stack, [first, broke, last])
    assert not result.success
    [failure] = [event for event in result.all_events if event.is_step_failure]
    description = failure.step_failure_data.user_failure_data.description
    assert description.startswith(f"1 of 3 pipelines failed: {broke[1]};")
    for workspace_id, pipeline_id in (first, last):
        assert set(materialized(partition_events(result, pipeline_id))) == {
            "crawl_results",
            "kb_documents",
            "page_changes",
        }
        assert stack.charges(workspace_id) == (1, 1)
    events = partition_events(result, broke[1])
    assert "ASSET_MATERIALIZATION" not in events and "ASSET_CHECK_EVALUATION" not in events
    [observation] = events["ASSET_OBSERVATION"]
    metadata = observation.asset_observation_data.asset_observation.metadata
    assert metadata["failed_step"].value == "crawl_results"
    assert "out of crawl credit" in metadata["error"].value
    assert stack.charges(broke[0]) == (0, 0)
    assert stack.web.hits("/b0") == stack.web.hits("/b1") == 0  # refused before any request
    assert not stack.locks.is_locked(pipeline_lock_name(broke[1]))


def test_a_pipeline_crawling_in_another_run_is_refused_in_the_batch(embedded: Stack):
    """One crawl at a time per pipeline: the batch does not crawl a pipeline another run holds."""
    busy = embedded.pipeline(embedded.site(1, prefix="/busy"))
    free = embedded.pipeline(embedded.site(1, prefix="/free"))
    embedded.locks.acquire(pipeline_lock_name(busy[1]), "another-run", ttl_seconds=60)
    result = run_batch(embedded, [busy, free])
    assert not result.success
    [observation] = partition_events(result, busy[1])["ASSET_OBSERVATION"]
    assert observation.asset_observation_data.asset_observation.metadata["error"].value == (
        "a run for this pipeline is already in progress"
    )
    assert embedded.web.hits("/busy0") == 0 and embedded.web.hits("/free0") == 1
    assert embedded.locks.owner_of(pipeline_lock_name(busy[1])) == "another-run"
    assert set(materialized(partition_events(result, free[1]))) == {"crawl_results", "kb_documents", "page_changes"}


def test_a_failed_kb_step_keeps_the_crawl_and_still_records_page_changes(embedded: Stack, monkeypatch):
    import pipelines_dagster.assets.kb_documents as module

    def broken(*args, **kwargs):
        raise ConnectionError("app database went away")

    monkeypatch.setattr(module, "index_crawl", broken)
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    result = run_batch(embedded, [(workspace_id, pipeline_id)])
    assert not result.success
    events = partition_events(result, pipeline_id)
    assert set(materialized(events)) == {"crawl_results", "page_changes"}
    [observation] = events["ASSET_OBSERVATION"]
    metadata = observation.asset_observation_data.asset_observation.metadata
    assert metadata["failed_step"].value == "kb_documents"
    assert metadata["error"].value == "ConnectionError: app database went away"


def test_a_crawl_that_fails_by_accident_is_retried_and_charged_once(embedded: Stack, monkeypatch):
    embedded.billing_enabled = True
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(2), credit=10_000)
    set_pipeline(embedded, pipeline_id, retry_delay_seconds=0.01)
    calls = fail_once_after_the_charge(monkeypatch)
    result = run_batch(embedded, [(workspace_id, pipeline_id)])
    assert result.success
    assert calls == [True, False]
    assert materialized(partition_events(result, pipeline_id))["crawl_results"]["charged_micros"] == 2000
    assert embedded.charges(workspace_id) == (1, 1)


def test_a_batch_member_retries_under_its_own_policy(embedded: Stack, monkeypatch):
    import pipelines_dagster.assets.crawl_results as module

    attempts: list[int] = []

    def broken(report):
        attempts.append(1)
        raise ConnectionError("blob store unreachable")

    monkeypatch.setattr(module, "_failed_urls_table", broken)
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1))
    set_pipeline(embedded, pipeline_id, retry_backoff="linear", retry_max=2, retry_delay_seconds=0.01)
    result = run_batch(embedded, [(workspace_id, pipeline_id)])
    assert not result.success and len(attempts) == 3
    [observation] = partition_events(result, pipeline_id)["ASSET_OBSERVATION"]
    metadata = observation.asset_observation_data.asset_observation.metadata
    assert metadata["error"].value == "ConnectionError: blob store unreachable"


def test_batch_tags_name_every_member_and_show_a_summary():
    tags = batch_tags([(3, 1), (17, 2), (4, 1)], trigger="scheduled")
    assert (tags["trigger"], tags["pipelines"]) == ("scheduled", "3, 17, 4")
    assert batch_pipeline_ids(tags) == [3, 4, 17]
    assert tags[member_workspace_tag(1)] == tags[member_workspace_tag(2)] == "member"
    # The index is hidden from the UI's run rows: only trigger, summary and the run queue's priority show.
    assert {key for key in tags if not key.startswith(".dagster/")} == {"trigger", "pipelines", "dagster/priority"}
    assert tags["dagster/priority"] == "-2"
    # Keys as Dagster requires them (one namespace; a deprecation today, an error to come).
    assert all(is_valid_tag_key(key) for key in tags)
    many = batch_tags([(n, 1) for n in range(1, 21)], trigger="scheduled")
    assert many["pipelines"] == "1, 2, 3, 4, 5 and 15 more" and len(batch_pipeline_ids(many)) == 20


def test_split_evenly_makes_as_few_chunks_as_possible_of_near_equal_size():
    assert [len(chunk) for chunk in split_evenly(list(range(45)), 20)] == [15, 15, 15]
    assert [len(chunk) for chunk in split_evenly(list(range(41)), 20)] == [14, 14, 13]
    assert split_evenly([1, 2, 3], 20) == [[1, 2, 3]]
    assert split_evenly([], 20) == []
    assert [list(chunk) for chunk in split_evenly([1, 2, 3], 1)] == [[1], [2], [3]]
    assert [n for chunk in split_evenly(list(range(1000)), 7) for n in chunk] == list(range(1000))
