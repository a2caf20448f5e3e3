"""Pipelines: created, changed and deleted, each checked as a whole before anything is written.

Every function works inside the caller's transaction, so a failure anywhere rolls back everything
the call wrote. The CLI and the HTTP API both use these."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.engine import refused_as_sequential
from pipelines_dagster.app_db.models import (
    Connector,
    ConnectorType,
    Folder,
    Pipeline,
    PipelineTrigger,
    stored_partition,
)
from pipelines_dagster.core.catalog.changes import KEEP, Keep
from pipelines_dagster.core.catalog.connector_types import ineligible_reason, is_pipeline_eligible
from pipelines_dagster.core.catalog.connectors import create_connector, reconcile_connector_indexing, set_initial_urls
from pipelines_dagster.core.catalog.folders import get_or_create_folder
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.catalog.schedules import ScheduleSpec, set_schedule
from pipelines_dagster.core.catalog.templates import BY_KEY, template_key
from pipelines_dagster.core.catalog.workspaces import get_workspace
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.errors import ConflictError, InvalidInputError, NotFoundError
from pipelines_dagster.core.validation import validate_max_runtime, validate_name, validate_queue_name, validate_urls

T = TypeVar("T")


class SystemManagedError(ConflictError):
    """The pipeline is a connector's own periodic indexing: it follows the connector, not edits."""


@dataclass(frozen=True, kw_only=True)
class PipelineChanges:
    """What `update_pipeline` changes: only the fields given. None clears a folder, URLs or a schedule."""

    name: str | Keep = KEEP
    save_to_kb: bool | Keep = KEEP
    enabled: bool | Keep = KEEP
    folder: str | Keep | None = KEEP
    """A folder at the KB root by name, created when missing; None is the root itself."""
    folder_id: int | Keep | None = KEEP
    urls: list[str] | Keep | None = KEEP
    """The pipeline's own URLs; None crawls its connector's. A template pipeline without a connector
    given URLs gets a web connector of its own over them, crawling as its template does."""
    connector_id: int | Keep = KEEP
    """The connector it crawls (a template pipeline is seeded without one)."""
    schedule: ScheduleSpec | Keep | None = KEEP
    retry: RetryPolicy | Keep = KEEP
    max_runtime_seconds: int | Keep | None = KEEP
    """How long one run may take; None: the deployment's maximum runtime."""
    worker_queue: str | Keep | None = KEEP
    """The Celery queue its runs go to; None: the run launcher's default queue."""


def _given(value: T | Keep) -> T | None:
    return None if value is KEEP else value


def _connector(session: Session, workspace_id: int, connector_id: int) -> Connector:
    connector = session.get(Connector, connector_id)
    if connector is None or connector.workspace_id != workspace_id:
        # A body field that points nowhere: invalid input, as any other bad value of the request.
        raise InvalidInputError("connector_id", f"connector {connector_id} is not in workspace {workspace_id}")
    if not is_pipeline_eligible(connector.connector_type):
        raise InvalidInputError("connector_id", ineligible_reason(connector.connector_type))
    return connector


def _free_name(session: Session, workspace_id: int, name: str, *, pipeline_id: int | None = None) -> str:
    pipeline_name = validate_name(name)
    same_name = sa.select(Pipeline.id).where(Pipeline.workspace_id == workspace_id, Pipeline.name == pipeline_name)
    if pipeline_id is not None:
        same_name = same_name.where(Pipeline.id != pipeline_id)
    if session.scalar(same_name):
        raise InvalidInputError("name", f"workspace {workspace_id} already has a pipeline named {pipeline_name!r}")
    return pipeline_name


def _one_folder(folder_given: bool, folder_id_given: bool) -> None:
    if folder_given and folder_id_given:
        raise InvalidInputError("folder_id", "give folder (a name) or folder_id, not both")


def _destination(session: Session, workspace_id: int, *, folder: str | None, folder_id: int | None) -> int | None:
    """The destination folder's id, None for the KB root."""
    if folder is not None:
        return get_or_create_folder(session, workspace_id=workspace_id, name=folder).id
    if folder_id is None:
        return None
    found = session.get(Folder, folder_id)
    if found is None or found.workspace_id != workspace_id:
        raise InvalidInputError("folder_id", f"folder {folder_id} is not in workspace {workspace_id}")
    return found.id


def _own_urls(connector: Connector | None, urls: list[str]) -> list[str]:
    if connector is None or connector.connector_type != ConnectorType.WEBCRAWLER.value:
        kind = connector.connector_type if connector else "uploads"
        raise InvalidInputError("urls", f"a {kind} pipeline crawls no URLs; leave urls out")
    return validate_urls(urls, field="urls")


def _checked_schedule(spec: ScheduleSpec) -> ScheduleSpec:
    """The rules for a schedule as a whole, reported under `schedule.` as the API names the fields."""
    try:
        return spec.validated()
    except InvalidInputError as exc:
        raise InvalidInputError(f"schedule.{exc.field}", exc.message) from None


def _editable(pipeline: Pipeline) -> Pipeline:
    if pipeline.system_managed:
        raise SystemManagedError(
            f"pipeline {pipeline.id} is connector {pipeline.connector_id}'s own periodic indexing; "
            "it follows the connector and cannot be changed or deleted here"
        )
    return pipeline


def create_pipeline(
    session: Session,
    *,
    workspace_id: int,
    connector_id: int | None,
    name: str,
    save_to_kb: bool = True,
    folder_name: str | None = None,
    folder_id: int | None = None,
    urls: list[str] | None = None,
    schedule: ScheduleSpec | None = None,
    enabled: bool = True,
    created_by: str | None = None,
    retry: RetryPolicy | None = None,
    max_runtime_seconds: int | None = None,
    worker_queue: str | None = None,
    now: datetime | None = None,
) -> Pipeline:
    """A user pipeline over a connector of the workspace (None: uploads), checked as a whole first."""
    workspace = get_workspace(session, workspace_id)
    connector = _connector(session, workspace_id, connector_id) if connector_id is not None else None
    pipeline_name = _free_name(session, workspace_id, name)
    spec = _checked_schedule(schedule) if schedule is not None else None
    own_urls = _own_urls(connector, urls) if urls is not None else None
    _one_folder(folder_name is not None, folder_id is not None)
    max_runtime = validate_max_runtime(max_runtime_seconds) if max_runtime_seconds is not None else None
    queue = validate_queue_name(worker_queue) if worker_queue is not None else None
    pipeline = Pipeline(
        workspace_id=workspace_id,
        connector_id=connector_id,
        name=pipeline_name,
        save_to_kb=save_to_kb,
        destination_folder_id=_destination(session, workspace_id, folder=folder_name, folder_id=folder_id),
        enabled=enabled,
        created_by=created_by or workspace.owner_user_id,
        config={},
        max_runtime_seconds=max_runtime,
        worker_queue=queue,
    )
    set_initial_urls(pipeline, own_urls)
    (retry or RetryPolicy()).apply_to(pipeline)
    with refused_as_sequential(session, lambda: _free_name(session, workspace_id, name)):
        session.add(pipeline)
    session.add(PipelineTrigger.manual_of(pipeline))
    moment = now or datetime.now(UTC)
    if spec is not None:
        set_schedule(session, pipeline, spec, now=moment)
    if connector_id is not None:
        reconcile_connector_indexing(session, connector_id, now=moment)
    return pipeline


def update_pipeline(
    session: Session, *, workspace_id: int, pipeline_id: int, changes: PipelineChanges, now: datetime | None = None
) -> Pipeline:
    """Change what `changes` gives and nothing else; a connector's own indexing pipeline is refused.

    Enabling or disabling runs the de-dup guard; a changed schedule gets a new next fire time.
    """
    pipeline = _editable(get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id))
    moment = now or datetime.now(UTC)
    connector_before = pipeline.connector_id
    _one_folder(changes.folder is not KEEP, changes.folder_id is not KEEP)
    if not isinstance(changes.name, Keep):
        wanted = changes.name

        def free_name() -> str:
            return _free_name(session, workspace_id, wanted, pipeline_id=pipeline.id)

        with refused_as_sequential(session, free_name):
            pipeline.name = free_name()
    if not isinstance(changes.save_to_kb, Keep):
        pipeline.save_to_kb = changes.save_to_kb
    if changes.folder is not KEEP or changes.folder_id is not KEEP:
        pipeline.destination_folder_id = _destination(
            session, workspace_id, folder=_given(changes.folder), folder_id=_given(changes.folder_id)
        )
    if not isinstance(changes.connector_id, Keep):
        pipeline.connector_id = _connector(session, workspace_id, changes.connector_id).id
        session.flush()
        session.refresh(pipeline, ["connector"])
    if not isinstance(changes.urls, Keep):
        _set_urls(session, pipeline, changes.urls)
    if not isinstance(changes.schedule, Keep):
        spec = None if changes.schedule is None else _checked_schedule(changes.schedule)
        set_schedule(session, pipeline, spec, now=moment)
    if not isinstance(changes.retry, Keep):
        changes.retry.apply_to(pipeline)
    if changes.max_runtime_seconds is not KEEP:
        runtime = _given(changes.max_runtime_seconds)
        pipeline.max_runtime_seconds = validate_max_runtime(runtime) if runtime is not None else None
    if changes.worker_queue is not KEEP:
        queue = _given(changes.worker_queue)
        pipeline.worker_queue = validate_queue_name(queue) if queue is not None else None
    if not isinstance(changes.enabled, Keep):
        pipeline.enabled = changes.enabled
    if pipeline.enabled and pipeline.connector_id is None and template_key(pipeline) is not None:
        raise InvalidInputError(
            "enabled",
            f"pipeline {pipeline.id} is a template with nothing to crawl yet: give it a connector_id or urls "
            "with (or before) enabling it",
        )
    session.flush()
    # The de-dup guard of every connector whose user pipelines this may have changed.
    if not isinstance(changes.enabled, Keep) or pipeline.connector_id != connector_before:
        # In id order, so two moves between the same connectors take their row locks in one order.
        for connector_id in sorted(c for c in {connector_before, pipeline.connector_id} if c is not None):
            reconcile_connector_indexing(session, connector_id, now=moment)
    return pipeline


def _set_urls(session: Session, pipeline: Pipeline, urls: list[str] | None) -> None:
    """The pipeline's own URLs; a template pipeline that has no connector gets one of its own over
    them, crawling as its template does (a site crawl from them with the template's bounds, or the list)."""
    key = template_key(pipeline)
    template = BY_KEY.get(key) if key is not None else None
    if urls is None or pipeline.connector_id is not None or template is None:
        set_initial_urls(pipeline, None if urls is None else _own_urls(pipeline.connector, urls))
        return
    site = None
    if template.site is not None:
        max_depth, max_pages = template.site
        try:
            site = SiteConfig.validated(start_urls=urls, max_depth=max_depth, max_pages=max_pages)
        except InvalidInputError as exc:
            raise InvalidInputError("urls", exc.message) from None
    connector = create_connector(
        session,
        workspace_id=pipeline.workspace_id,
        connector_type=ConnectorType.WEBCRAWLER.value,
        urls=None if site is not None else urls,
        site=site,
        name=pipeline.name,
    )
    pipeline.connector_id = connector.id
    session.flush()
    session.refresh(pipeline, ["connector"])


def set_pipeline_enabled(
    session: Session, *, workspace_id: int, pipeline_id: int, enabled: bool, now: datetime | None = None
) -> Pipeline:
    return update_pipeline(
        session, workspace_id=workspace_id, pipeline_id=pipeline_id, changes=PipelineChanges(enabled=enabled), now=now
    )


def delete_pipeline(session: Session, *, workspace_id: int, pipeline_id: int, now: datetime | None = None) -> None:
    pipeline = _editable(get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id))
    connector_id = pipeline.connector_id
    session.delete(pipeline)
    session.flush()
    if connector_id is not None:
        reconcile_connector_indexing(session, connector_id, now=now)


def get_pipeline(session: Session, *, workspace_id: int, pipeline_id: int) -> Pipeline:
    pipeline = session.get(Pipeline, pipeline_id)
    if pipeline is None or pipeline.workspace_id != workspace_id:
        raise NotFoundError(f"pipeline {pipeline_id} is not in workspace {workspace_id}")
    return pipeline


def list_pipelines(session: Session, *, workspace_id: int) -> list[Pipeline]:
    """The workspace's pipelines by id, connectors' own periodic indexing included."""
    return list(session.scalars(sa.select(Pipeline).where(Pipeline.workspace_id == workspace_id).order_by(Pipeline.id)))


# Connector types a crawl can run over (the others have no executor yet).
EXECUTABLE_CONNECTOR_TYPES = (ConnectorType.WEBCRAWLER.value,)


def is_runnable(pipeline: Pipeline) -> bool:
    """A run can be started for it: `runnable_partitions`' rule, for one row."""
    connector = pipeline.connector
    return pipeline.enabled and connector is not None and connector.connector_type in EXECUTABLE_CONNECTOR_TYPES


def _keys(session: Session, query: sa.Select[int, str | None]) -> dict[int, str]:
    return {pipeline_id: stored_partition(pipeline_id, stored) for pipeline_id, stored in session.execute(query)}


def runnable_partitions(session: Session, pipeline_ids: Iterable[int] | None = None) -> dict[int, str]:
    """The partition keys, by pipeline id, of the pipelines a run can be started for (among `pipeline_ids`, or
    all): enabled, with a connector of a type that has an executor. Only these are partitions a Dagster user
    can pick; a template seeded without a connector, or a disabled pipeline, joins them when it is given one
    and enabled."""
    query = (
        sa.select(Pipeline.id, Pipeline.partition_key)
        .join(Connector, Connector.id == Pipeline.connector_id)
        .where(Pipeline.enabled.is_(True), Connector.connector_type.in_(EXECUTABLE_CONNECTOR_TYPES))
    )
    if pipeline_ids is not None:
        query = query.where(Pipeline.id.in_(list(pipeline_ids)))
    return _keys(session, query)


def every_partition(session: Session) -> dict[int, str]:
    """The partition key of every pipeline, runnable or not, by id."""
    return _keys(session, sa.select(Pipeline.id, Pipeline.partition_key))


def pipeline_partitions(session: Session, pipeline_ids: Iterable[int]) -> dict[int, str]:
    """The partition keys of these pipelines (those that exist), by id: one query."""
    ids = sorted(set(pipeline_ids))
    if not ids:
        return {}
    return _keys(session, sa.select(Pipeline.id, Pipeline.partition_key).where(Pipeline.id.in_(ids)))


def pipeline_names_and_partitions(
    session: Session, pipeline_ids: Iterable[int]
) -> tuple[dict[int, str], dict[int, str]]:
    """The names and the partition keys of these pipelines (those that exist), by id: one query."""
    ids = sorted(set(pipeline_ids))
    if not ids:
        return {}, {}
    rows = session.execute(
        sa.select(Pipeline.id, Pipeline.name, Pipeline.partition_key).where(Pipeline.id.in_(ids))
    ).all()
    return {row.id: row.name for row in rows}, {row.id: stored_partition(row.id, row.partition_key) for row in rows}


def pipeline_queues(session: Session, pipeline_ids: Iterable[int]) -> dict[int, str]:
    """The Celery queues these pipelines' runs go to, by id, for those that have one of their own (a pipeline
    without one, or that does not exist, is left out: its runs take the run launcher's default): one query."""
    ids = sorted(set(pipeline_ids))
    if not ids:
        return {}
    rows = session.execute(
        sa.select(Pipeline.id, Pipeline.worker_queue).where(Pipeline.id.in_(ids), Pipeline.worker_queue.is_not(None))
    )
    return {pipeline_id: queue for pipeline_id, queue in rows if queue is not None}
