"""Run history of one workspace, read from the Dagster instance: run records, then the event log for counts and errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, get_args

import dagster as dg
import pydantic
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import Pipeline
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.launch import PARTITION_TAG
from pipelines_dagster.partitions import partition_key

if TYPE_CHECKING:
    from dagster._core.events import StepFailureData

RunStatus = Literal["queued", "running", "succeeded", "failed", "canceled"]

RUN_STATUS: Mapping[dg.DagsterRunStatus, RunStatus] = {
    dg.DagsterRunStatus.QUEUED: "queued",
    dg.DagsterRunStatus.NOT_STARTED: "queued",
    dg.DagsterRunStatus.STARTING: "queued",
    dg.DagsterRunStatus.STARTED: "running",
    dg.DagsterRunStatus.CANCELING: "running",
    # Under way, only not by a run worker of this deployment.
    dg.DagsterRunStatus.MANAGED: "running",
    dg.DagsterRunStatus.SUSPENDED: "running",
    dg.DagsterRunStatus.SUCCESS: "succeeded",
    dg.DagsterRunStatus.FAILURE: "failed",
    dg.DagsterRunStatus.CANCELED: "canceled",
}
DAGSTER_STATUSES: Mapping[RunStatus, list[dg.DagsterRunStatus]] = {
    status: [dagster for dagster, ours in RUN_STATUS.items() if ours == status] for status in get_args(RunStatus)
}
STEP_STATUS = {"SUCCESS": "succeeded", "FAILURE": "failed", "SKIPPED": "skipped", "IN_PROGRESS": "running"}

MAX_LIMIT = 100
WORKSPACE_TAG = "workspace_id"
PIPELINE_TAG = "pipeline_id"
TRIGGER_TAG = "trigger"
# Materializations are stamped by step workers, whose clocks may be off from the run worker's
# that stamps a run's start and end.
CLOCK_MARGIN_SECONDS = 60.0
# A run's end time is the timestamp of its RUN_FAILURE event itself; the margin only absorbs rounding.
FAILURE_MARGIN_SECONDS = 1.0
EVENTS_PER_QUERY = 1000


class PipelineRunView(pydantic.BaseModel):
    run_id: str
    pipeline_id: int
    pipeline_name: str | None
    workspace_id: int
    status: RunStatus
    trigger: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    crawls_attempted: int | None
    crawls_succeeded: int | None
    crawls_empty: int | None
    crawls_failed: int | None
    documents_created: int | None
    documents_updated: int | None
    documents_unchanged: int | None
    charged_micros: int | None
    blob_key: str | None
    error: str | None
    dagster_url: str | None


class StepSummary(pydantic.BaseModel):
    step_key: str
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int
    error: str | None


class PipelineRunDetail(PipelineRunView):
    steps: list[StepSummary]


class RunPage(pydantic.BaseModel):
    runs: list[PipelineRunView]
    next_cursor: str | None


class RunHistory:
    """What ran for a workspace, newest first; a run of another workspace is never read as one of its own.

    A run belongs to a workspace by its `workspace_id` tag, or, for a launch from the Dagster UI
    (which carries only `dagster/partition`), by its partition being one of the workspace's pipelines.
    """

    def __init__(
        self, instance: dg.DagsterInstance, sessions: sessionmaker[Session], *, ui_base_url: str | None = None
    ) -> None:
        self._instance = instance
        self._sessions = sessions
        self._ui_base_url = ui_base_url.rstrip("/") if ui_base_url else None

    def list_runs(
        self,
        workspace_id: int,
        *,
        pipeline_id: int | None = None,
        status: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of the workspace's runs (or one pipeline's), newest first; `cursor` is a page's `next_cursor`."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
        if status is not None and status not in DAGSTER_STATUSES:
            raise ValueError(f"status must be one of {', '.join(DAGSTER_STATUSES)}, got {status!r}")
        names = self._pipeline_names(workspace_id, pipeline_id)
        records = self._run_records(
            workspace_id,
            names,
            pipeline_id=pipeline_id,
            statuses=DAGSTER_STATUSES[status] if status else None,
            limit=limit + 1,
            cursor=cursor,
        )
        page = records[:limit]
        return RunPage(
            runs=self._views(workspace_id, page, names),
            next_cursor=page[-1].dagster_run.run_id if len(records) > limit else None,
        )

    def get_run(self, workspace_id: int, run_id: str) -> PipelineRunDetail | None:
        """The run with its steps, or None when it is unknown or another workspace's."""
        names = self._pipeline_names(workspace_id)
        records = self._run_records(workspace_id, names, run_ids=[run_id], limit=1)
        if not records:
            return None
        [view] = self._views(workspace_id, records, names)
        return PipelineRunDetail(**view.model_dump(), steps=self._steps(run_id))

    def _pipeline_names(self, workspace_id: int, pipeline_id: int | None = None) -> dict[int, str]:
        query = sa.select(Pipeline.id, Pipeline.name).where(Pipeline.workspace_id == workspace_id)
        if pipeline_id is not None:
            query = query.where(Pipeline.id == pipeline_id)
        with self._sessions() as session:
            return {pipeline: name for pipeline, name in session.execute(query)}

    def _run_records(
        self,
        workspace_id: int,
        pipelines: Mapping[int, str],
        *,
        limit: int,
        pipeline_id: int | None = None,
        statuses: Sequence[dg.DagsterRunStatus] | None = None,
        run_ids: Sequence[str] | None = None,
        cursor: str | None = None,
    ) -> list[dg.RunRecord]:
        """The newest `limit` runs of the workspace: those tagged with it, and UI launches of its pipelines."""
        # The pipeline's tag first: Dagster joins run_tags once per tag in this order, and with
        # stale statistics PostgreSQL starts from the first join, so it reads the pipeline's
        # runs instead of all of its workspace's (6 ms instead of 0.5 ms at 10,000 runs).
        tagged = {PIPELINE_TAG: partition_key(pipeline_id)} if pipeline_id is not None else {}
        tagged[WORKSPACE_TAG] = str(workspace_id)
        records = self._instance.get_run_records(
            dg.RunsFilter(run_ids=run_ids, statuses=statuses, tags=tagged), limit=limit, cursor=cursor
        )
        if pipelines:
            partitions = [partition_key(pipeline) for pipeline in pipelines]
            by_partition = self._instance.get_run_records(
                dg.RunsFilter(run_ids=run_ids, statuses=statuses, tags={PARTITION_TAG: partitions}),
                limit=limit,
                cursor=cursor,
            )
            # A run tagged with a workspace is that workspace's, whichever partition it ran.
            records = [*records, *(r for r in by_partition if WORKSPACE_TAG not in r.dagster_run.tags)]
        unique = {record.dagster_run.run_id: record for record in records}
        return sorted(unique.values(), key=lambda record: record.storage_id, reverse=True)[:limit]

    def _views(
        self, workspace_id: int, records: Sequence[dg.RunRecord], names: Mapping[int, str]
    ) -> list[PipelineRunView]:
        pipeline_ids = {record.dagster_run.run_id: _pipeline_id(record.dagster_run) for record in records}
        crawls = self._materializations(crawl_results.key, records, pipeline_ids)
        documents = self._materializations(kb_documents.key, records, pipeline_ids)
        errors = self._failures(records)
        views = []
        for record in records:
            run = record.dagster_run
            crawl = crawls.get(run.run_id, {})
            kb = documents.get(run.run_id, {})
            views.append(
                PipelineRunView(
                    run_id=run.run_id,
                    pipeline_id=pipeline_ids[run.run_id],
                    pipeline_name=names.get(pipeline_ids[run.run_id]),
                    workspace_id=workspace_id,
                    status=RUN_STATUS[run.status],
                    trigger=run.tags.get(TRIGGER_TAG),
                    created_at=_utc(record.create_timestamp),
                    started_at=_from_timestamp(record.start_time),
                    finished_at=_from_timestamp(record.end_time),
                    crawls_attempted=_int(crawl, "urls_attempted"),
                    crawls_succeeded=_int(crawl, "urls_succeeded"),
                    crawls_empty=_int(crawl, "urls_empty"),
                    crawls_failed=_int(crawl, "urls_failed"),
                    documents_created=_int(kb, "documents_created"),
                    documents_updated=_int(kb, "documents_updated"),
                    documents_unchanged=_int(kb, "documents_unchanged"),
                    charged_micros=_int(crawl, "charged_micros"),
                    blob_key=_str(crawl, "blob_key"),
                    error=errors.get(run.run_id),
                    dagster_url=f"{self._ui_base_url}/runs/{run.run_id}" if self._ui_base_url else None,
                )
            )
        return views

    def _materializations(
        self, asset_key: dg.AssetKey, records: Sequence[dg.RunRecord], pipeline_ids: Mapping[str, int]
    ) -> dict[str, Mapping[str, dg.MetadataValue]]:
        """The asset's materialization metadata per run of the page, from one event-log query.

        The event log filters by asset partition and time, not by run: asking for the page's
        pipelines between the first start and the last end of its runs reads the page's own
        events plus at most those of the same pipelines' runs that overlapped them.
        """
        started = [record for record in records if record.start_time is not None]
        if not started:
            return {}
        ends = [record.end_time for record in started]
        records_filter = dg.AssetRecordsFilter(
            asset_key=asset_key,
            asset_partitions=sorted({partition_key(pipeline_ids[r.dagster_run.run_id]) for r in started}),
            after_timestamp=min(record.start_time for record in started) - CLOCK_MARGIN_SECONDS,
            before_timestamp=None if None in ends else max(ends) + CLOCK_MARGIN_SECONDS,
        )
        wanted = {record.dagster_run.run_id for record in started}
        metadata: dict[str, Mapping[str, dg.MetadataValue]] = {}
        for event in _all_records(self._instance.fetch_materializations, records_filter):
            if event.run_id in wanted and event.asset_materialization is not None:
                metadata.setdefault(event.run_id, event.asset_materialization.metadata)
        return metadata

    def _failures(self, records: Sequence[dg.RunRecord]) -> dict[str, str]:
        """The first error of each failed run of the page, from one query of run failure events."""
        failed = [
            record
            for record in records
            if record.dagster_run.status == dg.DagsterRunStatus.FAILURE and record.end_time is not None
        ]
        if not failed:
            return {}
        ends = [record.end_time for record in failed]
        records_filter = dg.RunStatusChangeRecordsFilter(
            dg.DagsterEventType.RUN_FAILURE,
            after_timestamp=min(ends) - FAILURE_MARGIN_SECONDS,
            before_timestamp=max(ends) + FAILURE_MARGIN_SECONDS,
        )
        wanted = {record.dagster_run.run_id for record in failed}
        return {
            event.run_id: _run_failure_message(event)
            for event in _all_records(self._instance.fetch_run_status_changes, records_filter)
            if event.run_id in wanted
        }

    def _steps(self, run_id: str) -> list[StepSummary]:
        failures = self._instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
        # Only a step's last attempt ends in STEP_FAILURE; earlier ones are retries.
        errors = {
            event.event_log_entry.step_key: _step_failure_message(event.event_log_entry.dagster_event.step_failure_data)
            for event in failures
        }
        return [
            StepSummary(
                step_key=stats.step_key,
                status=STEP_STATUS.get(stats.status.value, "running") if stats.status else "running",
                started_at=_from_timestamp(stats.start_time),
                finished_at=_from_timestamp(stats.end_time),
                attempts=stats.attempts or 0,
                error=errors.get(stats.step_key),
            )
            for stats in self._instance.get_run_step_stats(run_id)
        ]


def _all_records(
    fetch: Callable[..., dg.EventRecordsResult],
    records_filter: dg.AssetRecordsFilter | dg.RunStatusChangeRecordsFilter,
) -> Iterator[dg.EventLogRecord]:
    cursor = None
    while True:
        result = fetch(records_filter, limit=EVENTS_PER_QUERY, cursor=cursor)
        yield from result.records
        if not result.has_more:
            return
        cursor = result.cursor


def _pipeline_id(run: dg.DagsterRun) -> int:
    # A UI launch carries no pipeline_id tag; its partition is the pipeline.
    return int(run.tags.get(PIPELINE_TAG) or run.tags[PARTITION_TAG])


def _run_failure_message(event: dg.EventLogRecord) -> str:
    dagster_event = event.event_log_entry.dagster_event
    # JobFailureData; None when the run was marked failed from outside, with only a message.
    failure = dagster_event.event_specific_data if dagster_event else None
    if failure is not None and failure.first_step_failure_event is not None:
        return _step_failure_message(failure.first_step_failure_event.step_failure_data)
    if failure is not None and failure.error is not None:
        return failure.error.message.strip()
    return event.event_log_entry.message


def _step_failure_message(data: StepFailureData) -> str:
    # A dg.Failure's description is the sentence written for the user.
    if data.user_failure_data is not None and data.user_failure_data.description:
        return data.user_failure_data.description
    error = data.error
    # Dagster wraps an exception from user code in its own ("Error occurred while executing op ...").
    if error is not None and data.error_source.value == "USER_CODE_ERROR" and error.cause is not None:
        error = error.cause
    return error.message.strip() if error is not None else "the step failed without an error"


def _int(metadata: Mapping[str, dg.MetadataValue], key: str) -> int | None:
    value = metadata[key].value if key in metadata else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(metadata: Mapping[str, dg.MetadataValue], key: str) -> str | None:
    value = metadata[key].value if key in metadata else None
    return value if isinstance(value, str) and value else None


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _from_timestamp(timestamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(timestamp, UTC) if timestamp is not None else None
