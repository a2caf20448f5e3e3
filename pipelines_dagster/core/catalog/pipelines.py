"""Creating workspaces, connectors, pipelines and their triggers, validated before anything is written.

Every function works inside the caller's transaction, so a failure anywhere
rolls back everything the call wrote. The CLI and the HTTP API both use these.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import (
    ApiToken,
    Connector,
    ConnectorType,
    Folder,
    Pipeline,
    PipelineTrigger,
    TriggerKind,
    Workspace,
)
from pipelines_dagster.core.catalog.connector_types import ineligible_reason, is_pipeline_eligible
from pipelines_dagster.core.catalog.retry import RetryPolicy
from pipelines_dagster.core.catalog.schedules import ScheduleSpec, validate_interval
from pipelines_dagster.core.crawl.site.config import CRAWL_MODE_KEY, SITE_KEY, CrawlMode, SiteConfig
from pipelines_dagster.core.errors import ConflictError, InvalidInputError, NotFoundError
from pipelines_dagster.core.validation import (
    validate_choice,
    validate_max_runtime,
    validate_name,
    validate_urls,
)

TOKEN_PREFIX = "pdk_"
URLS_KEY = "INITIAL_URLS"
TEMPLATE_KEY = "TEMPLATE"
"""Where a template pipeline's config says which built-in template it was seeded from (core/templates.py)."""
# last_used_at is for spotting stale tokens, so minutes are precise enough, and
# most uses of a token then need no write at all.
LAST_USED_RESOLUTION = timedelta(minutes=5)

T = TypeVar("T")


class SystemManagedError(ConflictError):
    """The pipeline is a connector's own periodic indexing: it follows the connector, not edits."""


class InvalidTokenError(LookupError):
    """An API token that is unknown or revoked; the message says which, and what to use instead."""


@contextmanager
def refused_as_sequential(session: Session, check: Callable[[], object]) -> Iterator[None]:
    """Write what the block adds or changes under a unique constraint that `check` (already passed) guards.

    A concurrent transaction may commit the same key between the check and the write: PostgreSQL makes the
    write wait for that commit, then fails it. The write runs in a savepoint, so the transaction lives on, and
    `check` is run again: it sees that commit now and refuses the write with the answer a sequential duplicate
    gets. An integrity error `check` does not explain is raised as it is.
    """
    try:
        with session.begin_nested():
            yield
            session.flush()
    except sa.exc.IntegrityError:
        check()
        raise


def initial_urls(row: Connector | Pipeline) -> list[str] | None:
    """The URLs a connector crawls, or a pipeline's own that replace its connector's."""
    return row.config.get(URLS_KEY)


def set_initial_urls(row: Connector | Pipeline, urls: list[str] | None) -> None:
    # A new dict, so the JSON column is seen as changed.
    config = {key: value for key, value in row.config.items() if key != URLS_KEY}
    row.config = config if urls is None else {**config, URLS_KEY: urls}


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def workspace_of_token(session: Session, token: str) -> int:
    """The workspace an API token names, noting that it was used; an unknown or revoked token is refused."""
    digest = hash_token(token)
    row = session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == digest))
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        raise InvalidTokenError("the API token is not valid; use the token printed when the workspace was created")
    if row.revoked_at is not None:
        raise InvalidTokenError("the API token was revoked; use a current token of the workspace")
    now = datetime.now(UTC)
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        stale = now - LAST_USED_RESOLUTION
        # The condition repeats the check, so concurrent uses write the row once.
        session.execute(
            sa.update(ApiToken)
            .where(ApiToken.id == row.id, sa.or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= stale))
            .values(last_used_at=now)
        )
    return row.workspace_id


@dataclass(frozen=True)
class NewWorkspace:
    workspace: Workspace
    api_token: str
    """Shown once; only its hash is stored."""


def create_workspace(session: Session, *, name: str, owner_user_id: str) -> NewWorkspace:
    workspace = Workspace(name=validate_name(name), owner_user_id=validate_name(owner_user_id, field="owner"))
    session.add(workspace)
    session.flush()
    return NewWorkspace(workspace, issue_api_token(session, workspace.id))


def issue_api_token(session: Session, workspace_id: int) -> str:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiToken(workspace_id=workspace_id, token_hash=hash_token(token), prefix=token[:12]))
    session.flush()
    return token


def get_workspace(session: Session, workspace_id: int) -> Workspace:
    workspace = session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFoundError(f"workspace {workspace_id} does not exist")
    return workspace


def create_connector(
    session: Session,
    *,
    workspace_id: int,
    connector_type: str,
    urls: list[str] | None = None,
    name: str | None = None,
    index_every_minutes: int | None = None,
    site: SiteConfig | None = None,
    now: datetime | None = None,
) -> Connector:
    """Create a connector; with `index_every_minutes`, also its own periodic indexing pipeline.

    A web connector crawls its `urls` (list mode) or, given a validated `site`, discovers a site."""
    workspace = get_workspace(session, workspace_id)
    if index_every_minutes is not None:
        validate_interval(index_every_minutes, field="index_every_minutes")
    kind = validate_choice(ConnectorType, connector_type, field="type", what="connector type")
    if kind is not ConnectorType.WEBCRAWLER and (urls or site):
        raise InvalidInputError("site" if site else "url", f"a {kind.value} connector takes no URLs")
    if site is not None and urls:
        raise InvalidInputError("site", "give the URLs to crawl (url) or a site to discover (site), not both")
    connector = Connector(
        workspace_id=workspace_id,
        connector_type=kind.value,
        name=validate_name(name) if name else f"{kind.value} connector",
        config={},
        periodic_indexing_enabled=index_every_minutes is not None,
        indexing_frequency_minutes=index_every_minutes,
    )
    if kind is ConnectorType.WEBCRAWLER and site is not None:
        connector.config = {CRAWL_MODE_KEY: CrawlMode.SITE.value, SITE_KEY: site.to_config()}
    elif kind is ConnectorType.WEBCRAWLER:
        set_initial_urls(connector, validate_urls(urls or [], field="url"))
    session.add(connector)
    session.flush()
    if index_every_minutes is not None:
        _create_default_pipeline(session, workspace, connector, now=now or datetime.now(UTC))
    return connector


def get_connector(session: Session, *, workspace_id: int, connector_id: int) -> Connector:
    connector = session.get(Connector, connector_id)
    if connector is None or connector.workspace_id != workspace_id:
        raise NotFoundError(f"connector {connector_id} is not in workspace {workspace_id}")
    return connector


def list_connectors(session: Session, *, workspace_id: int) -> list[Connector]:
    """The workspace's connectors by id."""
    query = sa.select(Connector).where(Connector.workspace_id == workspace_id).order_by(Connector.id)
    return list(session.scalars(query))


def _create_default_pipeline(
    session: Session, workspace: Workspace, connector: Connector, *, now: datetime
) -> Pipeline:
    """The connector's own periodic indexing, as a system-managed pipeline into the KB root."""
    assert connector.indexing_frequency_minutes is not None
    pipeline = Pipeline(
        workspace_id=workspace.id,
        connector_id=connector.id,
        name=f"{connector.name} #{connector.id} (periodic indexing)",
        save_to_kb=True,
        enabled=True,
        created_by=workspace.owner_user_id,
        system_managed=True,
    )
    session.add(pipeline)
    session.flush()
    session.add(manual_trigger(pipeline))
    trigger = set_schedule(session, pipeline, ScheduleSpec(every_minutes=connector.indexing_frequency_minutes), now=now)
    assert trigger is not None
    connector.next_scheduled_at = trigger.next_fire_at
    session.flush()
    return pipeline


DEDUP_REASON = "a user pipeline over this connector owns its indexing"


def reconcile_connector_indexing(session: Session, connector_id: int, *, now: datetime | None = None) -> None:
    """The de-dup guard: one scheduler per connector.

    While any enabled user pipeline wraps the connector, the connector's own
    periodic indexing (its system-managed pipeline's schedule) is off; when the
    last one is disabled or deleted, that schedule comes back. A schedule that
    was switched off for another reason is left alone.

    The guard counts, then writes, under the connector's row lock (PostgreSQL; on SQLite every
    transaction holds the writer lock from its start), so guards of one connector take turns and
    each counts what the one before it committed: two pipelines disabled at once cannot each still
    see the other enabled and leave the connector indexed by neither.
    """
    connector = session.get(Connector, connector_id, with_for_update=True, populate_existing=True)
    if connector is None:
        return
    trigger = session.scalar(
        _schedule_triggers()
        .join(Pipeline, PipelineTrigger.pipeline_id == Pipeline.id)
        .where(Pipeline.connector_id == connector_id, Pipeline.system_managed.is_(True))
        # Read after the lock: this session may hold the row from before another guard's commit.
        .execution_options(populate_existing=True)
    )
    if trigger is None:
        return
    owned = session.scalar(
        sa.select(sa.func.count())
        .select_from(Pipeline)
        .where(
            Pipeline.connector_id == connector_id,
            Pipeline.system_managed.is_(False),
            Pipeline.enabled.is_(True),
        )
    )
    if owned and trigger.enabled:
        trigger.enabled = False
        trigger.disabled_reason = DEDUP_REASON
        trigger.next_fire_at = None
        connector.periodic_indexing_enabled = False
        connector.next_scheduled_at = None
    elif not owned and not trigger.enabled and trigger.disabled_reason == DEDUP_REASON:
        trigger.enabled = True
        trigger.disabled_reason = None
        trigger.next_fire_at = ScheduleSpec.of(trigger).next_fire_after(now or datetime.now(UTC))
        connector.periodic_indexing_enabled = True
        connector.next_scheduled_at = trigger.next_fire_at
    session.flush()


def manual_trigger(pipeline: Pipeline) -> PipelineTrigger:
    """A new enabled manual trigger of the pipeline (not yet added): it is what lets the pipeline be run
    by hand, from the API's or the CLI's run-now (`run_engine.plan_manual_run`)."""
    return PipelineTrigger(
        workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, kind=TriggerKind.MANUAL.value, enabled=True
    )


def _schedule_triggers() -> sa.Select[PipelineTrigger]:
    return sa.select(PipelineTrigger).where(PipelineTrigger.kind == TriggerKind.SCHEDULE.value)


def schedule_triggers(session: Session, pipeline_ids: Iterable[int]) -> dict[int, PipelineTrigger]:
    """Each pipeline's schedule trigger (a pipeline has at most one), by pipeline id."""
    rows = session.scalars(_schedule_triggers().where(PipelineTrigger.pipeline_id.in_(list(pipeline_ids))))
    return {trigger.pipeline_id: trigger for trigger in rows}


def set_schedule(
    session: Session, pipeline: Pipeline, spec: ScheduleSpec | None, *, now: datetime
) -> PipelineTrigger | None:
    """Make the pipeline's schedule trigger say `spec` (validated): created, changed, or removed for None.

    An unchanged schedule keeps its next fire time, so re-saving a pipeline does not move it; a
    changed one gets a new one, except on a switched-off trigger, which keeps none.
    """
    trigger = schedule_triggers(session, [pipeline.id]).get(pipeline.id)
    if spec is None:
        if trigger is not None:
            session.delete(trigger)
        return None
    if trigger is None:
        trigger = PipelineTrigger(
            workspace_id=pipeline.workspace_id,
            pipeline_id=pipeline.id,
            kind=TriggerKind.SCHEDULE.value,
            enabled=True,
        )
        session.add(trigger)
    elif ScheduleSpec.of(trigger) == spec:
        return trigger
    trigger.cron, trigger.timezone, trigger.interval_minutes = spec.cron, spec.timezone, spec.every_minutes
    trigger.next_fire_at = spec.next_fire_after(now) if trigger.enabled else None
    session.flush()
    return trigger


def get_or_create_folder(session: Session, *, workspace_id: int, name: str) -> Folder:
    folder_name = validate_name(name, field="folder", max_length=255)
    folder = session.scalar(
        sa.select(Folder).where(
            Folder.workspace_id == workspace_id, Folder.parent_id.is_(None), Folder.name == folder_name
        )
    )
    if folder is None:
        folder = Folder(workspace_id=workspace_id, name=folder_name)
        session.add(folder)
        session.flush()
    return folder


class Keep(Enum):
    """The value of a `PipelineChanges` field that was not given: the pipeline keeps what it has."""

    KEEP = "keep"


KEEP = Keep.KEEP


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
    )
    set_initial_urls(pipeline, own_urls)
    (retry or RetryPolicy()).apply_to(pipeline)
    with refused_as_sequential(session, lambda: _free_name(session, workspace_id, name)):
        session.add(pipeline)
    session.add(manual_trigger(pipeline))
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


def template_key(pipeline: Pipeline) -> str | None:
    """The built-in template a pipeline was seeded from, by key; None for a pipeline a user made."""
    key = (pipeline.config or {}).get(TEMPLATE_KEY)
    return key if isinstance(key, str) else None


def _set_urls(session: Session, pipeline: Pipeline, urls: list[str] | None) -> None:
    """The pipeline's own URLs; a template pipeline that has no connector gets one of its own over
    them, crawling as its template does (a site crawl from them with the template's bounds, or the list)."""
    # Here, not at the top: the templates' presets build on this module.
    from pipelines_dagster.core.catalog.templates import BY_KEY

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


def get_pipeline(session: Session, *, workspace_id: int, pipeline_id: int) -> Pipeline:
    pipeline = session.get(Pipeline, pipeline_id)
    if pipeline is None or pipeline.workspace_id != workspace_id:
        raise NotFoundError(f"pipeline {pipeline_id} is not in workspace {workspace_id}")
    return pipeline


def list_pipelines(session: Session, *, workspace_id: int) -> list[Pipeline]:
    """The workspace's pipelines by id, connectors' own periodic indexing included."""
    return list(session.scalars(sa.select(Pipeline).where(Pipeline.workspace_id == workspace_id).order_by(Pipeline.id)))


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
