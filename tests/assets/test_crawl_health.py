"""One crawl-health rule through real runs: an unhealthy crawl (a start page answering 503, a list all 404 for a
minute, a success ratio under the threshold) records no removal, archives and notifies nothing, and fails its run
with the reason, while its blob and its charge stay; a truncated healthy crawl succeeds and removes only what
answered 404/410. Every launch path follows the rule the crawl recorded."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, NotificationDelivery, PageChange, Pipeline
from pipelines_dagster.assets.checks import asset_checks
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.core.catalog.connectors import set_initial_urls
from pipelines_dagster.core.crawl.site.config import SITE_KEY, SiteConfig
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.history import RunHistory
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.runs import run_tags
from tests.assets.conftest import Stack, materialization, subscriptions
from tests.assets.test_batch import partition_events, run_batch
from tests.assets.test_site_crawl import linked_page, urlset
from tests.notifications.test_events import RunEndSensors
from tests.support.web import NOT_FOUND, Reply

ALL = [crawl_results, kb_documents, page_changes]
DOWN = Reply(status=503, body="down", content_type="text/plain")


def run_pipeline(stack: Stack, workspace_id: int, pipeline_id: int) -> dg.ExecuteInProcessResult:
    """The `pipeline_run` job with its checks, as the code location runs it: each asset and check a step."""
    job = dg.Definitions(
        assets=ALL, asset_checks=asset_checks, jobs=[pipeline_run], resources=stack.resources()
    ).resolve_job_def(pipeline_run.name)
    return job.execute_in_process(
        partition_key=stack.key(pipeline_id),
        instance=stack.instance,
        tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
        raise_on_error=False,
    )


@pytest.fixture
def subscribe(stack: Stack) -> Iterator[Callable[[int], None]]:
    """Subscribe a workspace to pages.changed and run.failed (deleted afterwards, with its deliveries)."""
    with subscriptions(stack, ["pages.changed", "run.failed"]) as to:
        yield to


def timeline(stack: Stack, pipeline_id: int) -> Counter[str]:
    with stack.sessions() as session:
        return Counter(session.scalars(sa.select(PageChange.status).where(PageChange.pipeline_id == pipeline_id)))


def deliveries(stack: Stack, workspace_id: int, event_type: str) -> list[dict]:
    with stack.sessions() as session:
        payloads = session.scalars(
            sa.select(NotificationDelivery.payload)
            .where(NotificationDelivery.workspace_id == workspace_id, NotificationDelivery.event_type == event_type)
            .order_by(NotificationDelivery.id)
        )
        return [json.loads(payload)["data"] for payload in payloads]


def archived(stack: Stack, workspace_id: int) -> set[str | None]:
    return {document.url for document in stack.documents(workspace_id) if document.archived_at is not None}


def set_urls(stack: Stack, pipeline_id: int, urls: list[str]) -> None:
    with transaction(stack.sessions) as session:
        set_initial_urls(session.get(Connector, session.get(Pipeline, pipeline_id).connector_id), urls)


def assert_failed_unhealthy(
    stack: Stack, result: dg.ExecuteInProcessResult, workspace_id: int, why: str
) -> dict[str, object]:
    """The run failed with `why`, the crawl is stored with its verdict and blob, and neither the KB nor the
    timeline step ran on it; the crawl's metadata."""
    assert not result.success
    crawl = materialization(result, "crawl_results")
    assert crawl["crawl_healthy"] is False and why in crawl["crawl_health"]
    assert stack.blob.exists(crawl["blob_key"])
    assert {event.asset_key for event in result.get_asset_materialization_events()} == {crawl_results.key}
    [check] = [
        e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
        and e.asset_check_evaluation_data.check_name == "crawl_success_ratio"
    ]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR and why in check.description
    run = RunHistory(stack.instance, stack.sessions).get_run(workspace_id, result.run_id)
    assert run is not None and run.status == "failed" and why in (run.error or "")
    return crawl


def test_a_site_crawl_whose_start_page_answers_503_removes_nothing_and_fails_its_run(
    stack: Stack, subscribe: Callable[[int], None]
):
    web = stack.web
    listed, linked = [f"/s{n}" for n in range(4)], [f"/l{n}" for n in range(4)]
    web.route("/", linked_page("Home", *listed, *linked))
    web.route("/sitemap.xml", Reply(body=urlset(*map(web.url, listed)), content_type="application/xml"))
    for path in listed + linked:
        web.route(path, linked_page(f"Page {path}"))
    workspace_id, pipeline_id = stack.pipeline([], site=SiteConfig.validated(start_urls=[web.url("/")]))
    subscribe(workspace_id)
    assert run_pipeline(stack, workspace_id, pipeline_id).success
    assert timeline(stack, pipeline_id) == {"new": 9}
    assert len(deliveries(stack, workspace_id, "pages.changed")) == 1

    web.route("/", DOWN)
    down = run_pipeline(stack, workspace_id, pipeline_id)
    # The sitemap's pages succeed (4 of 5, at the threshold); the pages only the home page links to are not
    # reached, and would read as removed.
    crawl = assert_failed_unhealthy(stack, down, workspace_id, "its start URL failed")
    assert (crawl["urls_attempted"], crawl["urls_succeeded"], crawl["start_urls_failed"]) == (5, 4, 1)
    assert timeline(stack, pipeline_id) == {"new": 9}
    assert len(deliveries(stack, workspace_id, "pages.changed")) == 1
    assert archived(stack, workspace_id) == set()

    web.route("/", linked_page("Home", *listed, *linked))
    back = run_pipeline(stack, workspace_id, pipeline_id)
    assert back.success and materialization(back, "page_changes")["pages_same"] == 9
    assert timeline(stack, pipeline_id) == {"new": 9}
    assert len(deliveries(stack, workspace_id, "pages.changed")) == 1


def test_a_list_answering_404_for_one_crawl_removes_nothing_and_a_real_removal_after_is_still_told(
    stack: Stack, subscribe: Callable[[int], None]
):
    urls = stack.site(5)
    workspace_id, pipeline_id = stack.pipeline(urls)
    subscribe(workspace_id)
    sensors = RunEndSensors(stack)
    assert run_pipeline(stack, workspace_id, pipeline_id).success

    for n in range(5):
        stack.web.route(f"/p{n}", NOT_FOUND)
    down = run_pipeline(stack, workspace_id, pipeline_id)
    assert_failed_unhealthy(stack, down, workspace_id, "every URL of its list failed (5 of 5)")
    assert timeline(stack, pipeline_id) == {"new": 5}
    assert archived(stack, workspace_id) == set()
    assert len(deliveries(stack, workspace_id, "pages.changed")) == 1
    sensors.tick()
    [failed] = deliveries(stack, workspace_id, "run.failed")
    assert failed["run_id"] == down.run_id and "every URL of its list failed" in failed["error"]

    stack.site(5)  # the CDN answers again
    back = run_pipeline(stack, workspace_id, pipeline_id)
    assert back.success and materialization(back, "page_changes")["pages_new"] == 0
    assert timeline(stack, pipeline_id) == {"new": 5}

    stack.web.route("/p4", NOT_FOUND)  # 4 of 5: a healthy crawl, and p4 is really gone
    gone = run_pipeline(stack, workspace_id, pipeline_id)
    assert gone.success and materialization(gone, "crawl_results")["crawl_healthy"] is True
    assert timeline(stack, pipeline_id) == {"new": 5, "removed": 1}
    assert archived(stack, workspace_id) == {urls[4]}
    told = deliveries(stack, workspace_id, "pages.changed")
    assert len(told) == 2 and [(c["url"], c["status"]) for c in told[-1]["changes"]] == [(urls[4], "removed")]


def test_a_crawl_under_its_threshold_keeps_its_blob_and_charge_and_fails(
    stack: Stack, subscribe: Callable[[int], None]
):
    stack.billing_enabled = True
    urls = stack.site(5)
    workspace_id, pipeline_id = stack.pipeline(urls, credit=100 * stack.micros_per_crawl)
    subscribe(workspace_id)
    assert run_pipeline(stack, workspace_id, pipeline_id).success
    for path in ("/p0", "/p1"):
        stack.web.route(path, DOWN)
    set_urls(stack, pipeline_id, urls[:4])  # p4 leaves the list while half of it is down
    down = run_pipeline(stack, workspace_id, pipeline_id)
    crawl = assert_failed_unhealthy(
        stack, down, workspace_id, "2 of 4 URLs succeeded (50%), under the threshold of 80%"
    )
    assert crawl["charged_micros"] == 2 * stack.micros_per_crawl
    assert stack.charges(workspace_id) == (2, 2)
    balance = Billing(stack.sessions, enabled=True, micros_per_crawl=stack.micros_per_crawl).balance(workspace_id)
    assert balance == (100 - 5 - 2) * stack.micros_per_crawl
    assert timeline(stack, pipeline_id) == {"new": 5}
    assert archived(stack, workspace_id) == set()
    assert len(deliveries(stack, workspace_id, "pages.changed")) == 1

    stack.site(5)
    set_urls(stack, pipeline_id, urls)
    back = run_pipeline(stack, workspace_id, pipeline_id)
    assert back.success and materialization(back, "page_changes")["pages_new"] == 0
    assert timeline(stack, pipeline_id) == {"new": 5}


def test_a_truncated_healthy_crawl_succeeds_and_removes_only_what_answered_404(stack: Stack):
    web = stack.web
    paths = [f"/s{n}" for n in range(8)]
    web.route("/", linked_page("Home", *paths))
    for path in paths:
        web.route(path, linked_page(f"Page {path}"))
    site = SiteConfig.validated(start_urls=[web.url("/")], max_pages=20)
    workspace_id, pipeline_id = stack.pipeline([], site=site)
    assert run_pipeline(stack, workspace_id, pipeline_id).success
    with transaction(stack.sessions) as session:
        connector = session.get(Connector, session.get(Pipeline, pipeline_id).connector_id)
        connector.config = {**connector.config, SITE_KEY: {**connector.config[SITE_KEY], "max_pages": 6}}
    web.route("/s0", NOT_FOUND)

    truncated = run_pipeline(stack, workspace_id, pipeline_id)
    assert truncated.success
    crawl = materialization(truncated, "crawl_results")
    assert (crawl["discovery_truncated"], crawl["crawl_healthy"], crawl["crawl_complete"]) == (True, True, False)
    assert (crawl["urls_attempted"], crawl["urls_succeeded"]) == (6, 5)
    # s0 answered 404: removed and archived alike; the pages past max pages are neither.
    assert timeline(stack, pipeline_id) == {"new": 9, "removed": 1}
    assert archived(stack, workspace_id) == {web.url("/s0")}
    assert materialization(truncated, "kb_documents")["documents_archived"] == 1


def test_every_launch_path_fails_an_unhealthy_crawl_and_a_later_backfill_still_removes_nothing(stack: Stack):
    urls = stack.site(3)
    workspace_id, pipeline_id = stack.pipeline(urls)
    assert run_pipeline(stack, workspace_id, pipeline_id).success
    for n in range(3):
        stack.web.route(f"/p{n}", NOT_FOUND)
    why = "every URL of its list failed"

    # From the asset page: crawl_results alone with its check steps, which block; the crawl step does no
    # KB or timeline work on the crawl.
    job = dg.Definitions(assets=ALL, asset_checks=asset_checks, resources=stack.resources())
    alone = (
        job.resolve_implicit_global_asset_job_def()
        .get_subset(asset_selection={crawl_results.key})
        .execute_in_process(partition_key=stack.key(pipeline_id), instance=stack.instance, raise_on_error=False)
    )
    assert_failed_unhealthy(stack, alone, workspace_id, why)

    # A run without the check step (a re-execution of the crawl step): the crawl step judges and fails itself.
    step = stack.run(pipeline_id, workspace_id, assets=[crawl_results])
    assert_failed_unhealthy(stack, step, workspace_id, why)
    [failure] = [event for event in step.all_events if event.is_step_failure]
    assert failure.step_key == "crawl_results"
    assert why in failure.step_failure_data.user_failure_data.description

    # A batch run: the member fails with the reason, its KB and timeline are not built.
    batch = run_batch(stack, [(workspace_id, pipeline_id)])
    assert not batch.success
    events = partition_events(batch, pipeline_id)
    assert [e.asset_key for e in events["ASSET_MATERIALIZATION"]] == [crawl_results.key]
    [observation] = events["ASSET_OBSERVATION"]
    assert why in observation.asset_observation_data.asset_observation.metadata["error"].value
    member = RunHistory(stack.instance, stack.sessions).get_run(workspace_id, batch.run_id, pipeline_id=pipeline_id)
    assert member is not None and member.status == "failed" and why in (member.error or "")

    # A backfill of kb_documents and page_changes over the partition: the latest crawl is the unhealthy one.
    backfill = dg.materialize(
        [crawl_results.to_source_asset(), kb_documents, page_changes],
        partition_key=stack.key(pipeline_id),
        instance=stack.instance,
        resources=stack.resources(),
    )
    assert materialization(backfill, "page_changes")["pages_removed"] == 0
    assert materialization(backfill, "kb_documents")["documents_archived"] == 0
    assert timeline(stack, pipeline_id) == {"new": 3}
    assert archived(stack, workspace_id) == set()
    assert all("Paragraph about topic" in (document.content or "") for document in stack.documents(workspace_id))
