"""`crawl_results[pipeline]`: one crawl of a pipeline's URLs, stored as a JSON Lines blob and billed once."""

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import dagster as dg

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.assets.after_crawl import Event, PartitionSteps, error_message, run_steps
from pipelines_dagster.assets.partition import CrawlSource, own_partition, partition_pipeline_id, refused
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.crawl.health import CrawlHealth, judge_crawl, success_threshold
from pipelines_dagster.core.crawl.render.rule import RenderMode
from pipelines_dagster.core.crawl.throttle import describe_limits
from pipelines_dagster.core.ledger.costs import crawl_charge_key
from pipelines_dagster.core.run.checkpoint import Checkpoint, checkpoint_prefix
from pipelines_dagster.core.run.engine import execute_crawl
from pipelines_dagster.core.run.leases import NO_LOCK_WAIT, LockWait, OwnerState
from pipelines_dagster.core.run.plan import RunPlan, RunRefused, plan_run
from pipelines_dagster.core.run.report import CrawlProgress, CrawlReport
from pipelines_dagster.core.triggers.payloads import shown_payload, trigger_payload
from pipelines_dagster.crawl_metadata import (
    CRAWL_RESULTS,
    CrawlMetadata,
    CrawlProgressMetadata,
    latest_crawl,
)
from pipelines_dagster.partitions import pipelines_partitions
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import BlobStoreResource
from pipelines_dagster.resources.crawler import CrawlerResource
from pipelines_dagster.resources.locks import LocksResource
from pipelines_dagster.resources.notifications import NotificationsResource
from pipelines_dagster.runs import CONTRACT_TAGS, CRAWL_RESULTS_ASSET, PIPELINE_NAME_TAG, missing_run_tags, origin_of
from pipelines_dagster.settings import worker_name


class CrawlAttemptFailed(Exception):
    """A crawl attempt that failed by accident, not by a guard's refusal: retried under the pipeline's policy.

    Retrying is safe: the charge is keyed by the root run, documents are upserts, and the blob is
    replaced whole. The error that failed the attempt is the cause.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        super().__init__(f"the crawl attempt failed ({policy.describe()})")
        self.policy = policy


def retry_plan(error: Exception) -> tuple[RetryPolicy, BaseException]:
    """The policy a failed attempt is retried under (the default when the pipeline could not be
    read) and the error to report."""
    if isinstance(error, CrawlAttemptFailed):
        return error.policy, error.__cause__ or error
    return RetryPolicy(), error


# The retry policy each (run, partition) read at its latest attempt: a later attempt that cannot read the
# pipeline (the app database is out of reach) is retried under it, not under the default. Bounded, as a
# process may run many runs.
_policies: OrderedDict[tuple[str, str], RetryPolicy] = OrderedDict()
_POLICIES_KEPT = 1024


def _policy_read(key: tuple[str, str], policy: RetryPolicy) -> None:
    _policies[key] = policy
    _policies.move_to_end(key)
    while len(_policies) > _POLICIES_KEPT:
        _policies.popitem(last=False)


# How many runs may continue a crawl stopped past its maximum runtime (or whose process died), each
# from where the last stopped: Dagster's run retries, which carry the first run as their root.
MAX_CONTINUATIONS = 3
MAX_RUNTIME_TAG = "dagster/max_runtime"
MAX_RETRIES_TAG = "dagster/max_retries"


def _runtime_tags(instance: dg.DagsterInstance, run: dg.DagsterRun, plan: RunPlan) -> None:
    """Give the run the pipeline's maximum runtime, which run monitoring reads from its tags on every
    poll (so a tag set as it starts holds), and the number of continuations, unless it has its own."""
    tags = {MAX_RUNTIME_TAG: str(plan.max_runtime_seconds)} if plan.max_runtime_seconds is not None else {}
    if MAX_RETRIES_TAG not in run.tags:
        tags[MAX_RETRIES_TAG] = str(MAX_CONTINUATIONS)
    if any(run.tags.get(key) != value for key, value in tags.items()):
        instance.add_run_tags(run.run_id, tags)


def _checkpoint(run: dg.DagsterRun, plan: RunPlan, blob_store: BlobStoreResource) -> Checkpoint:
    """The checkpoint of the crawl `run` belongs to: its own, or the one of the run it retries.

    RunRefused when the run it retries was itself a continuation that stored nothing: the crawl
    makes no progress (every page it reaches stops its process, say), so it is not continued again.
    """
    root = run.root_run_id or run.run_id
    prefix = checkpoint_prefix(workspace_id=plan.workspace_id, pipeline_id=plan.pipeline_id, root_run_id=root)
    checkpoint = Checkpoint(blob_store.store(), prefix, run.run_id)
    if checkpoint.stalled(parent_run_id=run.parent_run_id, root_run_id=root):
        raise RunRefused(
            f"the crawl is not continued again: run {run.parent_run_id}, which continued it, stored no page before it "
            f"stopped; {len(list(checkpoint.records()))} pages are stored from earlier runs (root run {root}). "
            "Look at why its runs stop (the maximum runtime, the run's log), then run the pipeline again"
        )
    return checkpoint


# A `pipeline_run` that finds its pipeline's or connector's lock held by a run in progress waits this
# long for it. The run queue keeps a pipeline's own runs apart; what it cannot see is a batch run that
# covers the pipeline, or a trigger's run requested in the same moment as a batch: those meet here.
LOCK_WAIT_SECONDS = 30 * 60.0


def owner_state(instance: dg.DagsterInstance, run_id: str) -> OwnerState:
    """What the instance says of the run that owns a lock."""
    run = instance.get_run_by_id(run_id)
    if run is None:
        return OwnerState.UNKNOWN
    return OwnerState.ENDED if run.is_finished else OwnerState.RUNNING


def _failed_urls_table(report: CrawlReport) -> dg.TableMetadataValue:
    """The crawl's failed URLs (the first few) with their reasons, listed once: a table the UI renders."""
    return dg.MetadataValue.table(
        records=[dg.TableRecord({"url": url, "reason": reason}) for url, reason in report.failed_urls],
        schema=dg.TableSchema(columns=[dg.TableColumn("url"), dg.TableColumn("reason")]),
    )


def _judged(report: CrawlReport, pipeline: Pipeline, *, start_urls: int | None) -> tuple[float, CrawlHealth]:
    """The crawl's threshold and health, judged once, here: every reader follows what is recorded."""
    threshold = success_threshold(pipeline.config)
    return threshold, judge_crawl(
        attempted=report.attempted,
        succeeded=report.succeeded,
        failed=report.failed,
        threshold=threshold,
        truncated=report.discovery_truncated,
        start_urls=start_urls,
        start_urls_failed=report.start_urls_failed,
    )


def named(pipeline: Pipeline) -> str:
    """The pipeline as its run log's start and summary lines name it."""
    return f"pipeline {pipeline.id} ({pipeline.name})"


def progress_observation(partition_key: str, progress: CrawlProgress) -> dg.AssetObservation:
    """A crawl's progress as the observation history reads while the run lasts."""
    eta = progress.eta_seconds
    recorded = CrawlProgressMetadata(
        crawl_progress=str(progress),
        urls_attempted=progress.done,
        urls_succeeded=progress.succeeded,
        urls_empty=progress.empty,
        urls_failed=progress.failed,
        urls_total=progress.total,
        pages_per_second=round(progress.pages_per_second, 2),
        eta_seconds=round(eta, 1) if eta is not None else None,
        elapsed_seconds=round(progress.elapsed_seconds, 1),
        rate_limited_by=progress.limited_by,
    )
    return dg.AssetObservation(asset_key=CRAWL_RESULTS, partition=partition_key, metadata=recorded.to_metadata())


@dataclass(frozen=True)
class Crawled:
    """A crawl the step stored: the metadata of its materialization, and what the steps after it
    read (the pipeline row the crawl loaded, the crawl as stored), so they ask neither the app
    database for the pipeline nor the event log for the crawl again."""

    metadata: dict[str, Any]
    pipeline: Pipeline
    source: CrawlSource


def _tag_the_run(instance: dg.DagsterInstance, run: dg.DagsterRun, pipeline: Pipeline) -> None:
    """Give a run launched from the Dagster UI the run contract's tags, which history and triggers read."""
    missing = missing_run_tags(
        run.tags, pipeline_id=pipeline.id, workspace_id=pipeline.workspace_id, pipeline_name=pipeline.name
    )
    if missing:
        instance.add_run_tags(run.run_id, missing)


def _load(
    app_db: AppDatabaseResource, pipeline_id: int, *, tag: Callable[[Pipeline], None] | None
) -> tuple[Pipeline, RunPlan]:
    """The pipeline's row and its run plan (the guards, which refuse a missing pipeline), from one
    read of the row; `tag` sees the row before the guards, so a refused run is tagged too."""
    with app_db.sessions() as session:
        pipeline = session.get(Pipeline, pipeline_id)
        if pipeline is not None and tag is not None:
            tag(pipeline)
        # The plan's own lookup of the row finds it in the session: no second read. The connector's credentials
        # are opened here, in the process that crawls, and live in its memory only.
        plan = plan_run(session, pipeline_id, keyring=app_db.keyring())
    assert pipeline is not None
    return pipeline, plan


def crawl_partition(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    partition_key: str,
    *,
    app_db: AppDatabaseResource,
    locks: LocksResource,
    billing: BillingResource,
    blob_store: BlobStoreResource,
    crawler: CrawlerResource,
    trigger_tags: Mapping[str, str],
    log: dg.DagsterLogManager,
    log_event: Callable[[dg.AssetObservation], None],
    attempt: int = 1,
    lock_wait: LockWait = NO_LOCK_WAIT,
    resumable: bool = False,
    tag_run: bool = False,
) -> Crawled:
    """Crawl one pipeline's partition within `run`: the metadata of its materialization, and what
    the steps after it read.

    Raises a Failure that is not retried when a guard refuses the crawl, and CrawlAttemptFailed,
    with the pipeline's retry policy, when anything else stops it. `trigger_tags` say what fired
    it (a webhook delivery or an event id), so its payload is shown with the crawl. `lock_wait`:
    how long the crawl waits for a lock another run in progress holds. `resumable`: the crawl keeps
    a checkpoint, and goes on from the one the runs it retries left (`pipeline_run`'s crawls).
    `tag_run`: a run of this one pipeline that lacks the run contract's tags (a launch from the
    Dagster UI) is given them. `log_event` records the crawl's progress (an observation of
    crawl_results) once every progress interval, where history reads it while the run lasts.
    """
    started_at = time.time()
    attempt_of = (run.run_id, partition_key)
    pipeline_id = partition_pipeline_id(partition_key)
    # Our own launchers set every contract tag: no tagging on their runs.
    untagged = tag_run and not all(tag in run.tags for tag in (*CONTRACT_TAGS, PIPELINE_NAME_TAG))
    try:
        pipeline, plan = _load(app_db, pipeline_id, tag=partial(_tag_the_run, instance, run) if untagged else None)
    except RunRefused as exc:
        raise refused(str(exc)) from None
    except Exception as exc:
        raise CrawlAttemptFailed(_policies.get(attempt_of, RetryPolicy())) from exc
    own_partition(pipeline, partition_key)
    _policy_read(attempt_of, plan.retry)
    if resumable:
        _runtime_tags(instance, run, plan)

    def progress(done: CrawlProgress) -> None:
        # The one write per progress interval that history reads, beside the line the run log shows.
        log.info(f"pipeline {plan.pipeline_id}: {done}")
        log_event(progress_observation(partition_key, done))

    # Everything past the guards is retried when it fails, under the pipeline's own policy.
    try:
        config = crawler.crawler.config
        user_agent = plan.user_agent or config.user_agent
        log.info(
            f"{named(pipeline)}: crawl started (attempt {attempt}): {plan.scope()}, {config.per_host_concurrency} "
            f"requests per host and {config.global_concurrency} in all at a time{_rendering(plan)}; as "
            f"{user_agent!r}, {_robots(plan, obeyed=config.obey_robots)}"
        )
        previous = latest_crawl(instance, partition_key)
        # Keyed by the root run, so a retried step or a re-executed run charges once.
        charge_key = crawl_charge_key(run.root_run_id or run.run_id, pipeline_id)
        checkpoint = _checkpoint(run, plan, blob_store) if resumable else None
        report = execute_crawl(
            plan,
            run_id=run.run_id,
            charge_key=charge_key,
            locks=locks.locks,
            billing=billing.billing,
            blob_store=blob_store.store(),
            crawler=crawler.crawler,
            previous_blob_key=previous.blob_key if previous else None,
            owners=lambda owner: owner_state(instance, owner),
            lock_wait=lock_wait,
            checkpoint=checkpoint,
            progress=progress,
            warn=lambda message: log.warning(f"pipeline {plan.pipeline_id}: {message}"),
        )
        log.info(f"{named(pipeline)}: crawl finished: {report.summary()}")
        start_urls = len(report.start_urls) if plan.site is not None else None
        threshold, health = _judged(report, pipeline, start_urls=start_urls)
        if not health.healthy:
            log.warning(
                f"pipeline {plan.pipeline_id}: the crawl is unhealthy ({health.why}): no page is recorded as "
                "removed or archived after it, and the run fails"
            )
        elif not health.complete:
            log.warning(
                f"pipeline {plan.pipeline_id}: the crawl is incomplete ({health.why}): the pages it did not reach "
                "are not recorded as removed or archived"
            )
        crawl = CrawlMetadata(
            pipeline_id=plan.pipeline_id,
            pipeline_name=pipeline.name,
            workspace_id=plan.workspace_id,
            urls_attempted=report.attempted,
            urls_succeeded=report.succeeded,
            urls_empty=report.empty,
            urls_failed=report.failed,
            urls_unchanged=report.unchanged,
            bytes=report.bytes_written,
            blob_key=report.blob_key,
            blob_url=report.blob_url,
            charged_micros=report.charged_micros,
            started_at=started_at,
            duration_seconds=round(report.duration_seconds, 3),
            attempt=attempt,
            retry_policy=plan.retry.describe(),
            previous_crawl_run_id=previous.run_id if previous else None,
            pages_discovered=report.pages_discovered,
            discovery_truncated=report.discovery_truncated if report.pages_discovered is not None else None,
            pages_duplicate=report.pages_duplicate,
            pages_links_capped=report.pages_links_capped,
            sitemaps_skipped=report.sitemaps_skipped,
            sitemaps_truncated=report.sitemaps_truncated,
            pages_resumed=report.resumed or None,
            resumed_from_run_id=run.root_run_id if report.resumed else None,
            start_urls=start_urls,
            start_urls_failed=report.start_urls_failed if start_urls is not None else None,
            min_success_ratio=threshold,
            crawl_healthy=health.healthy,
            crawl_complete=health.complete,
            crawl_health=health.why,
            pages_per_second=round(report.pages_per_second, 2),
            rate_limited_by=describe_limits(report.limits),
            worker=worker_name(),
            render=plan.render.value,
            pages_rendered=report.rendered if plan.render is not RenderMode.NEVER else None,
            render_seconds=round(report.render_seconds, 3) if plan.render is not RenderMode.NEVER else None,
            pages_html=report.kinds["html"],
            pages_text=report.kinds["text"],
            pages_pdf=report.kinds["pdf"],
            pages_docx=report.kinds["docx"],
            user_agent=user_agent,
            robots="ignore" if plan.robots_waived or not config.obey_robots else "obey",
            robots_ignored_on=", ".join(sorted(plan.robots_waived)) or None,
        )
        metadata = crawl.to_metadata()
        metadata["failed_urls"] = _failed_urls_table(report)
        # Dagster's own row count (the UI shows it with the asset): the blob holds a row per URL attempted.
        metadata["dagster/row_count"] = report.attempted
        with app_db.sessions() as session:
            origin = origin_of(trigger_tags)
            payload = trigger_payload(session, delivery_id=origin.delivery_id, event_id=origin.event_id)
        if payload is not None:
            shown = shown_payload(payload)
            metadata["trigger_payload"] = dg.MetadataValue.json(shown) if isinstance(shown, dict | list) else str(shown)
        if not plan.save_to_kb:
            metadata["kb_documents"] = "skipped: this pipeline keeps the raw crawl only (save to KB is off)"
    except RunRefused as exc:
        raise refused(str(exc)) from None
    except Exception as exc:
        raise CrawlAttemptFailed(plan.retry) from exc
    return Crawled(
        metadata=metadata,
        pipeline=pipeline,
        source=CrawlSource(run_id=run.run_id, blob_key=report.blob_key, metadata=crawl),
    )


@dg.asset(
    name=CRAWL_RESULTS_ASSET,
    partitions_def=pipelines_partitions,
    # Retries follow each pipeline's own policy (RetryRequested below), not one fixed for the asset.
    kinds={"python"},
    description=__doc__,
)
def crawl_results(
    context: dg.AssetExecutionContext,
    app_db: AppDatabaseResource,
    locks: LocksResource,
    billing: BillingResource,
    blob_store: BlobStoreResource,
    crawler: CrawlerResource,
    notifications: NotificationsResource,
) -> Iterator[dg.MaterializeResult[Any] | Event]:
    try:
        crawled = crawl_partition(
            context.instance,
            context.run,
            context.partition_key,
            app_db=app_db,
            locks=locks,
            billing=billing,
            blob_store=blob_store,
            crawler=crawler,
            trigger_tags=context.run.tags,
            log=context.log,
            log_event=context.log_event,
            attempt=context.retry_number + 1,
            resumable=True,
            tag_run=True,
            lock_wait=LockWait(
                seconds=LOCK_WAIT_SECONDS,
                waiting=lambda owner: context.log.info(
                    f"pipeline {context.partition_key}: run {owner} is crawling it (or its connector); "
                    "this run crawls when that one ends"
                ),
            ),
        )
    except dg.Failure:
        raise
    except Exception as exc:
        policy, cause = retry_plan(exc)
        retry = context.retry_number + 1
        if retry > policy.max_retries:
            # The last attempt's own error, not Dagster's "Exceeded max_retries": it is what run
            # history, the UI and run.failed show.
            raise dg.Failure(
                description=f"crawl attempt {retry} of {policy.max_retries + 1} failed: {error_message(cause)}",
                allow_retries=False,
            ) from cause
        wait = policy.delay(retry)
        context.log.warning(
            f"crawl attempt {retry} failed ({error_message(cause)}); retry {retry} of {policy.max_retries} "
            f"in {wait:g} s ({policy.backoff.value} backoff)"
        )
        raise dg.RetryRequested(max_retries=policy.max_retries, seconds_to_wait=wait) from cause
    yield dg.MaterializeResult(metadata=crawled.metadata)
    # What the run does not execute as steps of its own follows here, from the blob just stored.
    steps = PartitionSteps(
        context.partition_key,
        app_db=app_db,
        blob_store=blob_store,
        notifications=notifications,
        log=context.log,
    )
    yield from steps.after_crawl(crawled.pipeline, crawled.source, executed=run_steps(context))
    if steps.unhealthy is not None:
        raise dg.Failure(description=steps.unhealthy, allow_retries=False)
    if steps.errors:
        raise dg.Failure(
            description=f"the crawl is stored, but {'; '.join(steps.errors)}; materialize the failed asset "
            "for this partition to build it from the stored crawl, without crawling again",
            allow_retries=False,
        )


def _robots(plan: RunPlan, *, obeyed: bool) -> str:
    """What the start line says of robots.txt: obeyed, or where (and why) it is not read."""
    if not obeyed:
        return "ignoring robots.txt everywhere (the deployment's crawler does)"
    if plan.robots_waived:
        return f"ignoring robots.txt on {', '.join(sorted(plan.robots_waived))} (hosts the workspace owns)"
    return "obeying robots.txt"


def _rendering(plan: RunPlan) -> str:
    """What the start line says of rendering: nothing when the crawl renders nothing."""
    if plan.render is RenderMode.ALWAYS:
        return "; every page rendered in a browser (render: always)"
    if plan.render is RenderMode.AUTO:
        return "; pages that need it rendered in a browser (render: auto)"
    return ""
