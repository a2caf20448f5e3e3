"""Run history of one workspace, read from the Dagster instance: run records, then the event log for counts and errors.

A `pipeline_run` run is one entry. A `pipeline_batch` run is an entry per pipeline it covers, whose
state is that pipeline's own: its materializations and the failure it logged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, get_args

import dagster as dg
import pydantic
import sqlalchemy as sa
from dagster._core.events import JobFailureData
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.models import Pipeline, stored_partition
from pipelines_dagster.core.ledger.costs import ChargedRun, run_charges
from pipelines_dagster.crawl_metadata import CrawlMetadata, CrawlProgressMetadata
from pipelines_dagster.runs import (
    ERROR_METADATA,
    MEMBER,
    PARTITION_TAG,
    PIPELINE_ASSETS,
    PIPELINE_BATCH_JOB,
    PIPELINE_BATCH_OP,
    PIPELINE_TAG,
    TRIGGER_TAG,
    WORKSPACE_TAG,
    member_pipeline_tag,
    member_workspace_tag,
    partition_of,
    pipeline_id_of,
    pipeline_ids_of,
)

if TYPE_CHECKING:
    from dagster._core.execution.plan.objects import StepFailureData

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
# The statuses a batch run can be in while one of its pipelines is in a status: a pipeline's
# status in a batch is its own, so a failed batch run holds succeeded pipelines.
BATCH_RUN_STATUSES: Mapping[RunStatus, list[dg.DagsterRunStatus]] = {
    "queued": [*DAGSTER_STATUSES["queued"], dg.DagsterRunStatus.STARTED],
    "running": DAGSTER_STATUSES["running"],
    "succeeded": [
        *DAGSTER_STATUSES["running"],
        *DAGSTER_STATUSES["succeeded"],
        *DAGSTER_STATUSES["failed"],
        *DAGSTER_STATUSES["canceled"],
    ],
    "failed": [*DAGSTER_STATUSES["running"], *DAGSTER_STATUSES["failed"], *DAGSTER_STATUSES["canceled"]],
    "canceled": DAGSTER_STATUSES["canceled"],
}
STEP_STATUS = {"SUCCESS": "succeeded", "FAILURE": "failed", "SKIPPED": "skipped", "IN_PROGRESS": "running"}
# The assets a pipeline's run materializes, in the order its steps run.
STEP_ASSETS = CRAWL_RESULTS, KB_DOCUMENTS, PAGE_CHANGES = tuple(dg.AssetKey(name) for name in PIPELINE_ASSETS)

MAX_LIMIT = 100
# Materializations are stamped by step workers, whose clocks may be off from the run worker's
# that stamps a run's start and end.
CLOCK_MARGIN_SECONDS = 60.0
# A run's end time is the timestamp of its RUN_FAILURE event itself; the margin only absorbs rounding.
FAILURE_MARGIN_SECONDS = 1.0
EVENTS_PER_QUERY = 1000
# How many of a partition's newest observations are read for a running crawl's progress: its newest
# progress is the newest observation, unless a step logged a failure after it (the run then ends).
PROGRESS_LOOKBACK = 5


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
    charged_micros: int | None = pydantic.Field(
        description="The crawl's charge, in micro-credits: one per root run, shared by the runs that retry or "
        "re-execute it."
    )
    new_charge_micros: int | None = pydantic.Field(
        description="What this run charged itself: its charged_micros when it made the charge, 0 when it found "
        "it made (a retry or a re-execution). Summed over runs, each charge counts once."
    )
    blob_key: str | None
    error: str | None
    dagster_url: str | None = pydantic.Field(
        description="The run's page in the Dagster UI (PIPELINES_DAGSTER_URL, by default http://127.0.0.1:3000)."
    )
    root_run_id: str | None = pydantic.Field(
        default=None,
        description="The first run of the chain this run retries or re-executes (the runs that continue a crawl "
        "stopped past its maximum runtime share it); null for a first run.",
    )
    pages_resumed: int | None = pydantic.Field(
        default=None,
        description="Pages earlier runs of the chain stored and this run's crawl replayed, not fetched or charged "
        "again; null when it continued nothing.",
    )
    crawls_total: int | None = pydantic.Field(
        default=None,
        description="While the crawl runs: the URLs it has to do, its list's or the pages a site crawl discovered "
        "so far (it may find more); null once the crawl is stored, whose crawls_attempted is its total.",
    )
    pages_per_second: float | None = pydantic.Field(
        default=None, description="Pages fetched per second of crawling: so far while it runs, in all once stored."
    )
    eta_seconds: float | None = pydantic.Field(
        default=None,
        description="While the crawl runs: seconds until crawls_total is done at the rate so far; null otherwise.",
    )
    rate_limited_by: str | None = pydantic.Field(
        default=None,
        description="What limits (or limited) the crawl's rate: a robots.txt Crawl-delay, the host budget shared "
        "by all runs, per-host or global concurrency; null when nothing held its requests back.",
    )
    progress_at: datetime | None = pydantic.Field(
        default=None,
        description="While the crawl runs: when the counts were recorded (every 10 s of crawling; none in a "
        "crawl's first 10 s); null once the crawl is stored.",
    )


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


@dataclass(frozen=True)
class _Entry:
    """One pipeline of one run: all of a `pipeline_run`, or one pipeline of a `pipeline_batch`."""

    record: dg.RunRecord
    workspace_id: int
    pipeline_id: int
    batch: bool
    partition: str
    """The partition key the run's events of this pipeline are under."""

    @property
    def run(self) -> dg.DagsterRun:
        return self.record.dagster_run

    @property
    def key(self) -> tuple[str, int]:
        return self.run.run_id, self.pipeline_id

    @property
    def cursor(self) -> str:
        """Where the next page starts: after this run, or after this pipeline of a batch run."""
        return f"{self.run.run_id}_{self.pipeline_id}" if self.batch else self.run.run_id


@dataclass(frozen=True)
class _Live:
    """A crawl under way: its newest progress, and when the step recorded it."""

    progress: CrawlProgressMetadata
    at: float


@dataclass(frozen=True)
class _MemberEvents:
    """What one pipeline of a batch run logged: its materializations and failures, by asset."""

    materializations: Mapping[dg.AssetKey, dg.EventLogRecord]
    failures: Mapping[dg.AssetKey, dg.EventLogRecord]
    live: _Live | None = None
    """Its crawl's newest progress, while it crawls."""

    def metadata(self, asset_key: dg.AssetKey) -> Mapping[str, dg.MetadataValue]:
        record = self.materializations.get(asset_key)
        return record.asset_materialization.metadata if record and record.asset_materialization else {}

    @property
    def started_at(self) -> float | None:
        for record in (self.materializations.get(CRAWL_RESULTS), *self.failures.values()):
            event = record.asset_event if record else None
            started_at = CrawlMetadata.read(event.metadata).started_at if event is not None else None
            if started_at is not None:
                return started_at
        return None

    @property
    def finished_at(self) -> float | None:
        stamps = [record.timestamp for record in (*self.materializations.values(), *self.failures.values())]
        return max(stamps) if stamps else None

    @property
    def error(self) -> str | None:
        errors = [error for key in STEP_ASSETS if (error := self._error(key)) is not None]
        return "; ".join(errors) or None

    def _error(self, asset_key: dg.AssetKey) -> str | None:
        """The error the step's failure observation logged; None when it did not fail."""
        record = self.failures.get(asset_key)
        observation = record.asset_observation if record else None
        return str(observation.metadata[ERROR_METADATA].value) if observation is not None else None

    def status(self, run: dg.DagsterRun) -> RunStatus:
        if self.failures:
            return "failed"
        if PAGE_CHANGES in self.materializations:  # its last step
            return "succeeded"
        if run.status == dg.DagsterRunStatus.STARTED:
            return "running" if self.materializations or self.live else "queued"
        return RUN_STATUS[run.status]

    def steps(self) -> list[StepSummary]:
        steps, started = [], self.started_at
        for key in STEP_ASSETS:
            record = self.failures.get(key) or self.materializations.get(key)
            if record is None:
                continue
            failed = key in self.failures
            steps.append(
                StepSummary(
                    step_key=key.to_user_string(),
                    status="failed" if failed else "succeeded",
                    started_at=_from_timestamp(started),
                    finished_at=_from_timestamp(record.timestamp),
                    attempts=1,
                    error=self._error(key),
                )
            )
            started = record.timestamp
        return steps


class RunHistory:
    """What ran for a workspace, newest first; a run of another workspace is never read as one of its own.

    A run belongs to a workspace by its `workspace_id` tag, or, for a launch from the Dagster UI
    (which carries only `dagster/partition`), by its partition being one of the workspace's pipelines.
    A batch run is listed once for each of its pipelines that is the workspace's (by its run config).
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
        status: RunStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of the workspace's runs (or one pipeline's), newest first; `cursor` is a page's `next_cursor`."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
        if status is not None and status not in DAGSTER_STATUSES:
            raise ValueError(f"status must be one of {', '.join(DAGSTER_STATUSES)}, got {status!r}")
        names, keys = self._pipelines(workspace_id, pipeline_id)
        after_run, _, after_pipeline = (cursor or "").partition("_")
        fetch = partial(self._run_records, workspace_id, list(keys.values()), pipeline_id=pipeline_id, status=status)
        records = fetch(limit=limit + 1, cursor=after_run or None)
        entries = self._entries(workspace_id, records, pipeline_id, keys)
        if after_pipeline.isdigit():
            # The page before ended inside this batch run: its later pipelines come first.
            resumed = self._entries(workspace_id, fetch(limit=1, run_ids=[after_run]), pipeline_id, keys)
            entries = [entry for entry in resumed if entry.pipeline_id > int(after_pipeline)] + entries
        listed = [
            (entry, view)
            for entry, view in zip(entries, self._views(entries, names), strict=True)
            if status is None or view.status == status
        ]
        next_cursor: str | None
        if len(listed) > limit:
            listed = listed[:limit]
            next_cursor = listed[-1][0].cursor
        else:
            # Every entry of the runs read was looked at; more runs may follow the last of them.
            last = entries[-1].cursor if entries else records[-1].dagster_run.run_id if records else None
            next_cursor = last if len(records) > limit else None
        return RunPage(runs=[view for _, view in listed], next_cursor=next_cursor)

    def get_run(self, workspace_id: int, run_id: str, *, pipeline_id: int | None = None) -> PipelineRunDetail | None:
        """The run with its steps (for a batch run, those of `pipeline_id`, by default its first pipeline
        of the workspace), or None when it is unknown or another workspace's."""
        names, keys = self._pipelines(workspace_id)
        records = self._run_records(workspace_id, list(keys.values()), run_ids=[run_id], limit=1)
        entries = [
            entry
            for entry in self._entries(workspace_id, records, None, keys)
            if pipeline_id is None or entry.pipeline_id == pipeline_id
        ]
        if not entries:
            return None
        entry = entries[0]
        members = self._member_events([entry] if entry.batch else [])
        [view] = self._views([entry], names, members=members)
        steps = members[entry.key].steps() if entry.batch else self._steps(run_id)
        return PipelineRunDetail(**view.model_dump(), steps=steps)

    def run_views(self, run_id: str) -> list[PipelineRunView]:
        """The entry of each pipeline of a run, whichever workspaces they are in, from one read of the run and
        one set of event-log reads for all of them, so a batch run of many pipelines costs what one does: what
        the run-status sensors read of a run that ended. A pipeline deleted since has no entry."""
        records = self._instance.get_run_records(dg.RunsFilter(run_ids=[run_id]), limit=1)
        if not records:
            return []
        record = records[0]
        tags = record.dagster_run.tags
        order = {pipeline_id: index for index, pipeline_id in enumerate(pipeline_ids_of(tags))}
        query = sa.select(Pipeline.id, Pipeline.name, Pipeline.workspace_id, Pipeline.partition_key).where(
            Pipeline.id.in_(order)
        )
        with self._sessions() as session:
            rows = session.execute(query).all()
        names = {row.id: row.name for row in rows}
        entries = []
        for workspace_id in sorted({row.workspace_id for row in rows}):
            # A run tagged with a workspace is that workspace's alone, as `get_run` reads it.
            if tags.get(WORKSPACE_TAG, str(workspace_id)) != str(workspace_id):
                continue
            keys = {
                row.id: stored_partition(row.id, row.partition_key) for row in rows if row.workspace_id == workspace_id
            }
            entries += [
                entry for entry in self._entries(workspace_id, [record], None, keys) if entry.pipeline_id in keys
            ]
        entries.sort(key=lambda entry: order[entry.pipeline_id])
        return self._views(entries, names)

    def _pipelines(self, workspace_id: int, pipeline_id: int | None = None) -> tuple[dict[int, str], dict[int, str]]:
        """The names and the partition keys of the workspace's pipelines (or the one's), by id."""
        query = sa.select(Pipeline.id, Pipeline.name, Pipeline.partition_key).where(
            Pipeline.workspace_id == workspace_id
        )
        if pipeline_id is not None:
            query = query.where(Pipeline.id == pipeline_id)
        with self._sessions() as session:
            rows = session.execute(query).all()
        return {row.id: row.name for row in rows}, {row.id: stored_partition(row.id, row.partition_key) for row in rows}

    def _run_records(
        self,
        workspace_id: int,
        partitions: Sequence[str],
        *,
        limit: int,
        pipeline_id: int | None = None,
        status: RunStatus | None = None,
        run_ids: Sequence[str] | None = None,
        cursor: str | None = None,
    ) -> list[dg.RunRecord]:
        """The newest `limit` runs of the workspace: those tagged with it, UI launches of its pipelines,
        and batch runs that cover any of them."""
        statuses = DAGSTER_STATUSES[status] if status else None
        # The pipeline's tag first: Dagster joins run_tags once per tag in this order, and with
        # stale statistics PostgreSQL starts from the first join, so it reads the pipeline's
        # runs instead of all of its workspace's (6 ms instead of 0.5 ms at 10,000 runs).
        tagged = {PIPELINE_TAG: str(pipeline_id)} if pipeline_id is not None else {}
        tagged[WORKSPACE_TAG] = str(workspace_id)
        members = {member_pipeline_tag(pipeline_id): MEMBER} if pipeline_id is not None else {}
        members[member_workspace_tag(workspace_id)] = MEMBER
        records = [
            *self._instance.get_run_records(
                dg.RunsFilter(run_ids=run_ids, statuses=statuses, tags=tagged), limit=limit, cursor=cursor
            ),
            *self._instance.get_run_records(
                dg.RunsFilter(run_ids=run_ids, statuses=BATCH_RUN_STATUSES[status] if status else None, tags=members),
                limit=limit,
                cursor=cursor,
            ),
        ]
        if partitions:
            by_partition = self._instance.get_run_records(
                dg.RunsFilter(run_ids=run_ids, statuses=statuses, tags={PARTITION_TAG: list(partitions)}),
                limit=limit,
                cursor=cursor,
            )
            # A run tagged with a workspace is that workspace's, whichever partition it ran.
            records += [r for r in by_partition if WORKSPACE_TAG not in r.dagster_run.tags]
        unique = {record.dagster_run.run_id: record for record in records}
        return sorted(unique.values(), key=lambda record: record.storage_id, reverse=True)[:limit]

    def _entries(
        self, workspace_id: int, records: Sequence[dg.RunRecord], pipeline_id: int | None, keys: Mapping[int, str]
    ) -> list[_Entry]:
        """The page's entries; a batch member's partition is the one its config names, else its pipeline's."""
        entries = []
        for record in records:
            run = record.dagster_run
            if run.job_name != PIPELINE_BATCH_JOB:
                single = _pipeline_id(run)
                entries.append(
                    _Entry(
                        record,
                        workspace_id,
                        single,
                        batch=False,
                        partition=run.tags.get(PARTITION_TAG, str(single)),
                    )
                )
                continue
            # The run config says whose each pipeline is, also after a pipeline was deleted.
            members = sorted(
                (member["pipeline_id"], member.get("partition_key") or partition_of(keys, member["pipeline_id"]))
                for member in _batch_members(run)
                if member["workspace_id"] == workspace_id and pipeline_id in (None, member["pipeline_id"])
            )
            entries.extend(_Entry(record, workspace_id, member, batch=True, partition=key) for member, key in members)
        return entries

    def _views(
        self,
        entries: Sequence[_Entry],
        names: Mapping[int, str],
        *,
        members: Mapping[tuple[str, int], _MemberEvents] | None = None,
    ) -> list[PipelineRunView]:
        single = [entry for entry in entries if not entry.batch]
        crawls = self._asset_records(self._instance.fetch_materializations, CRAWL_RESULTS, single)
        documents = self._asset_records(self._instance.fetch_materializations, KB_DOCUMENTS, single)
        # A crawl under way has stored nothing yet: its progress says how far it got.
        crawling = self._live(
            [entry for entry in single if entry.key not in crawls and RUN_STATUS[entry.run.status] == "running"]
        )
        if members is None:
            members = self._member_events([entry for entry in entries if entry.batch])
        errors = self._failures(list({entry.run.run_id: entry.record for entry in entries}.values()))
        with self._sessions() as session:
            charges = run_charges(
                session,
                (
                    ChargedRun(
                        run_id=entry.run.run_id,
                        root_run_id=entry.run.root_run_id or entry.run.run_id,
                        pipeline_id=entry.pipeline_id,
                    )
                    for entry in entries
                ),
            )
        views = []
        for entry in entries:
            run, record = entry.run, entry.record
            if entry.batch:
                events = members[entry.key]
                status = events.status(run)
                crawl = CrawlMetadata.read(events.metadata(CRAWL_RESULTS))
                kb = events.metadata(KB_DOCUMENTS)
                started_at = _from_timestamp(events.started_at)
                done = status in ("succeeded", "failed", "canceled")
                finished_at = _from_timestamp((events.finished_at or record.end_time) if done else None)
                error = events.error or (errors.get(run.run_id) if status == "failed" else None)
                live = events.live
            else:
                status = RUN_STATUS[run.status]
                crawl, kb = CrawlMetadata.of_event(crawls.get(entry.key)), _metadata(documents.get(entry.key))
                started_at, finished_at = _from_timestamp(record.start_time), _from_timestamp(record.end_time)
                error = errors.get(run.run_id)
                verdict = crawl.verdict
                if status == "failed" and verdict is not None and not verdict.healthy:
                    # The blocking check that failed the run names only itself; the crawl says why.
                    error = verdict.failure
                live = crawling.get(entry.key)
            charge = charges.get((run.run_id, entry.pipeline_id))
            views.append(
                PipelineRunView(
                    run_id=run.run_id,
                    pipeline_id=entry.pipeline_id,
                    pipeline_name=names.get(entry.pipeline_id),
                    workspace_id=entry.workspace_id,
                    status=status,
                    trigger=run.tags.get(TRIGGER_TAG),
                    created_at=_utc(record.create_timestamp),
                    started_at=started_at,
                    finished_at=finished_at,
                    **_crawl_counts(crawl, live),
                    documents_created=_int(kb, "documents_created"),
                    documents_updated=_int(kb, "documents_updated"),
                    documents_unchanged=_int(kb, "documents_unchanged"),
                    charged_micros=charge.shared_micros if charge else crawl.charged_micros,
                    # No ledger entry: billing is off (nothing charged), or the run never crawled.
                    new_charge_micros=charge.new_micros if charge else None if crawl.charged_micros is None else 0,
                    blob_key=crawl.blob_key,
                    error=error,
                    dagster_url=f"{self._ui_base_url}/runs/{run.run_id}" if self._ui_base_url else None,
                    root_run_id=run.root_run_id,
                    pages_resumed=crawl.pages_resumed,
                )
            )
        return views

    def _live(self, entries: Sequence[_Entry]) -> dict[tuple[str, int], _Live]:
        """The newest progress of each crawl under way, from a few of its partition's newest observations:
        a query per entry, with a small limit, so a crawl that ran for hours costs no more than a new one."""
        found = {}
        for entry in entries:
            start = entry.record.start_time
            if start is None:
                continue
            records_filter = dg.AssetRecordsFilter(
                asset_key=CRAWL_RESULTS,
                asset_partitions=[entry.partition],
                after_timestamp=start - CLOCK_MARGIN_SECONDS,
            )
            for record in self._instance.fetch_observations(records_filter, limit=PROGRESS_LOOKBACK).records:
                observation = record.asset_observation
                progress = CrawlProgressMetadata.read(observation.metadata) if observation is not None else None
                if record.run_id == entry.run.run_id and progress is not None:
                    found[entry.key] = _Live(progress, record.timestamp)
                    break
        return found

    def _member_events(self, entries: Sequence[_Entry]) -> dict[tuple[str, int], _MemberEvents]:
        """What each pipeline of the page's batch runs logged, from a query per asset and event kind."""
        if not entries:
            return {}
        fetched = {
            (kind, asset_key): self._asset_records(fetch, asset_key, entries)
            for kind, fetch in (
                ("materialization", self._instance.fetch_materializations),
                ("observation", self._instance.fetch_observations),
            )
            for asset_key in STEP_ASSETS
        }
        members = {
            entry.key: _MemberEvents(
                materializations={
                    key: record for key in STEP_ASSETS if (record := fetched["materialization", key].get(entry.key))
                },
                failures={
                    key: record
                    for key in STEP_ASSETS
                    if (record := fetched["observation", key].get(entry.key))
                    and record.asset_observation is not None
                    and ERROR_METADATA in record.asset_observation.metadata
                },
            )
            for entry in entries
        }
        crawling = self._live(
            [
                entry
                for entry in entries
                if entry.run.status == dg.DagsterRunStatus.STARTED
                and CRAWL_RESULTS not in members[entry.key].materializations
                and not members[entry.key].failures
            ]
        )
        return {key: replace(events, live=crawling.get(key)) for key, events in members.items()}

    def _asset_records(
        self,
        fetch: Callable[..., dg.EventRecordsResult],
        asset_key: dg.AssetKey,
        entries: Sequence[_Entry],
    ) -> dict[tuple[str, int], dg.EventLogRecord]:
        """The asset's event per (run, pipeline) of the page, from one event-log query.

        The event log filters by asset partition and time, not by run: asking for the page's
        pipelines between the first start and the last end of its runs reads the page's own
        events plus at most those of the same pipelines' runs that overlapped them.
        """
        started = [entry for entry in entries if entry.record.start_time is not None]
        if not started:
            return {}
        starts = [start for entry in started if (start := entry.record.start_time) is not None]
        ends = [end for entry in started if (end := entry.record.end_time) is not None]
        records_filter = dg.AssetRecordsFilter(
            asset_key=asset_key,
            asset_partitions=sorted({entry.partition for entry in started}),
            after_timestamp=min(starts) - CLOCK_MARGIN_SECONDS,
            # Open-ended while any of the runs is still going.
            before_timestamp=max(ends) + CLOCK_MARGIN_SECONDS if len(ends) == len(started) else None,
        )
        wanted = {entry.key for entry in started}
        owners = {entry.partition: entry.pipeline_id for entry in started}
        found: dict[tuple[str, int], dg.EventLogRecord] = {}
        for event in _all_records(fetch, records_filter):
            key = (event.run_id, owners.get(event.partition_key or "", 0))
            if key in wanted:
                found.setdefault(key, event)
        return found

    def _failures(self, records: Sequence[dg.RunRecord]) -> dict[str, str]:
        """The first error of each failed run of the page, from one query of run failure events."""
        failed = [
            record
            for record in records
            if record.dagster_run.status == dg.DagsterRunStatus.FAILURE and record.end_time is not None
        ]
        if not failed:
            return {}
        ends = [end for record in failed if (end := record.end_time) is not None]
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
            event.event_log_entry.step_key: _step_failure_message(
                event.event_log_entry.get_dagster_event().step_failure_data
            )
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


def _batch_members(run: dg.DagsterRun) -> list[dict[str, Any]]:
    """The pipelines of a batch run with their workspaces, from the run config the sensor gave it."""
    ops = run.run_config.get("ops", {})
    assert isinstance(ops, Mapping)  # run config is JSON: "ops" holds a mapping of op name to its config
    members: list[dict[str, Any]] = ops.get(PIPELINE_BATCH_OP, {}).get("config", {}).get("pipelines", [])
    return members


def _crawl_counts(crawl: CrawlMetadata, live: _Live | None) -> dict[str, Any]:
    """A run's crawl figures: those it stored, or while it crawls, those of its newest progress."""
    if live is None:
        return {
            "crawls_attempted": crawl.urls_attempted,
            "crawls_succeeded": crawl.urls_succeeded,
            "crawls_empty": crawl.urls_empty,
            "crawls_failed": crawl.urls_failed,
            "pages_per_second": crawl.pages_per_second,
            "rate_limited_by": crawl.rate_limited_by,
        }
    progress = live.progress
    return {
        "crawls_attempted": progress.urls_attempted,
        "crawls_succeeded": progress.urls_succeeded,
        "crawls_empty": progress.urls_empty,
        "crawls_failed": progress.urls_failed,
        "crawls_total": progress.urls_total,
        "pages_per_second": progress.pages_per_second,
        "eta_seconds": progress.eta_seconds,
        "rate_limited_by": progress.rate_limited_by,
        "progress_at": _from_timestamp(live.at),
    }


def _metadata(record: dg.EventLogRecord | None) -> Mapping[str, dg.MetadataValue]:
    materialization = record.asset_materialization if record else None
    return materialization.metadata if materialization else {}


def _pipeline_id(run: dg.DagsterRun) -> int:
    pipeline_id = pipeline_id_of(run.tags)
    if pipeline_id is None:
        raise ValueError(f"run {run.run_id} is for no pipeline")
    return pipeline_id


def _run_failure_message(event: dg.EventLogRecord) -> str:
    dagster_event = event.event_log_entry.dagster_event
    # None when the run was marked failed from outside, with only a message.
    failure = dagster_event.event_specific_data if dagster_event else None
    if isinstance(failure, JobFailureData) and failure.first_step_failure_event is not None:
        return _step_failure_message(failure.first_step_failure_event.step_failure_data)
    if isinstance(failure, JobFailureData) and failure.error is not None:
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


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _from_timestamp(timestamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(timestamp, UTC) if timestamp is not None else None
