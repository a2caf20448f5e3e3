"""Creating workspaces, connectors, pipelines and their triggers, validated before anything is written.

Every function works inside the caller's transaction, so a failure anywhere
rolls back everything the call wrote. The CLI and the HTTP API both use these.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

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
from pipelines_dagster.core.connector_types import ineligible_reason, is_pipeline_eligible
from pipelines_dagster.core.retry import RetryPolicy
from pipelines_dagster.core.schedule import (
    next_cron_fire,
    next_interval_fire,
    validate_cron,
    validate_interval,
    validate_timezone,
)
from pipelines_dagster.core.validation import InvalidInputError, validate_choice, validate_name, validate_urls

TOKEN_PREFIX = "pdk_"


class NotFoundError(LookupError):
    """A referenced row does not exist (or is not in the caller's workspace)."""


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class NewWorkspace:
    workspace: Workspace
    api_token: str
    """Shown once; only its hash is stored."""


def create_workspace(session: Session, *, name: str, owner_user_id: str) -> NewWorkspace:
    workspace = Workspace(
        name=validate_name(name), owner_user_id=validate_name(owner_user_id, field="owner")
    )
    session.add(workspace)
    session.flush()
    return NewWorkspace(workspace, issue_api_token(session, workspace.id))


def issue_api_token(session: Session, workspace_id: int) -> str:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiToken(workspace_id=workspace_id, token_hash=hash_token(token), prefix=token[:12])
    )
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
    now: datetime | None = None,
) -> Connector:
    """Create a connector; with `index_every_minutes`, also its own periodic indexing pipeline."""
    workspace = get_workspace(session, workspace_id)
    if index_every_minutes is not None:
        validate_interval(index_every_minutes, field="index_every_minutes")
    kind = validate_choice(ConnectorType, connector_type, field="type", what="connector type")
    config: dict[str, object] = {}
    if kind is ConnectorType.WEBCRAWLER:
        config["INITIAL_URLS"] = validate_urls(urls or [], field="url")
    elif urls:
        raise InvalidInputError("url", f"a {kind.value} connector takes no URLs")
    connector = Connector(
        workspace_id=workspace_id,
        connector_type=kind.value,
        name=validate_name(name) if name else f"{kind.value} connector",
        config=config,
        periodic_indexing_enabled=index_every_minutes is not None,
        indexing_frequency_minutes=index_every_minutes,
    )
    session.add(connector)
    session.flush()
    if index_every_minutes is not None:
        _create_default_pipeline(session, workspace, connector, now=now or datetime.now(UTC))
    return connector


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
    next_fire = next_interval_fire(connector.indexing_frequency_minutes, after=now)
    session.add(
        PipelineTrigger(
            workspace_id=workspace.id,
            pipeline_id=pipeline.id,
            kind=TriggerKind.SCHEDULE.value,
            interval_minutes=connector.indexing_frequency_minutes,
            next_fire_at=next_fire,
        )
    )
    connector.next_scheduled_at = next_fire
    session.flush()
    return pipeline


DEDUP_REASON = "a user pipeline over this connector owns its indexing"


def reconcile_connector_indexing(session: Session, connector_id: int, *, now: datetime | None = None) -> None:
    """The de-dup guard: one scheduler per connector.

    While any enabled user pipeline wraps the connector, the connector's own
    periodic indexing (its system-managed pipeline's schedule) is off; when the
    last one is disabled or deleted, that schedule comes back. A schedule that
    was switched off for another reason is left alone.
    """
    connector = session.get(Connector, connector_id)
    if connector is None:
        return
    trigger = session.scalar(
        sa.select(PipelineTrigger)
        .join(Pipeline, PipelineTrigger.pipeline_id == Pipeline.id)
        .where(
            Pipeline.connector_id == connector_id,
            Pipeline.system_managed.is_(True),
            PipelineTrigger.kind == TriggerKind.SCHEDULE.value,
        )
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
        assert trigger.interval_minutes is not None
        trigger.enabled = True
        trigger.disabled_reason = None
        trigger.next_fire_at = next_interval_fire(trigger.interval_minutes, after=now or datetime.now(UTC))
        connector.periodic_indexing_enabled = True
        connector.next_scheduled_at = trigger.next_fire_at
    session.flush()


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """Either a cron expression with its timezone, or a fixed interval."""

    cron: str | None = None
    timezone: str | None = None
    every_minutes: int | None = None

    def validated(self) -> ScheduleSpec:
        if self.cron is not None and self.every_minutes is not None:
            raise InvalidInputError("cron", "give either a cron expression or an interval, not both")
        if self.cron is not None:
            if self.timezone is None:
                raise InvalidInputError(
                    "timezone", "a cron schedule needs a timezone, e.g. UTC or Europe/Stockholm"
                )
            validate_timezone(self.timezone)
            return ScheduleSpec(cron=validate_cron(self.cron), timezone=self.timezone)
        if self.timezone is not None:
            raise InvalidInputError("timezone", "a timezone only goes with a cron expression")
        if self.every_minutes is not None:
            return ScheduleSpec(every_minutes=validate_interval(self.every_minutes))
        raise InvalidInputError("cron", "give a cron expression with a timezone, or an interval")

    def next_fire_after(self, moment: datetime) -> datetime:
        if self.cron is not None and self.timezone is not None:
            return next_cron_fire(self.cron, self.timezone, after=moment)
        assert self.every_minutes is not None
        return next_interval_fire(self.every_minutes, after=moment)


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


def create_pipeline(
    session: Session,
    *,
    workspace_id: int,
    connector_id: int | None,
    name: str,
    save_to_kb: bool = True,
    folder_name: str | None = None,
    schedule: ScheduleSpec | None = None,
    enabled: bool = True,
    created_by: str | None = None,
    retry: RetryPolicy | None = None,
    now: datetime | None = None,
) -> Pipeline:
    workspace = get_workspace(session, workspace_id)
    pipeline_name = validate_name(name)
    spec = schedule.validated() if schedule is not None else None
    if connector_id is not None:
        connector = session.get(Connector, connector_id)
        if connector is None or connector.workspace_id != workspace_id:
            raise NotFoundError(f"connector {connector_id} is not in workspace {workspace_id}")
        if not is_pipeline_eligible(connector.connector_type):
            raise InvalidInputError("connector_id", ineligible_reason(connector.connector_type))
    if session.scalar(
        sa.select(Pipeline.id).where(Pipeline.workspace_id == workspace_id, Pipeline.name == pipeline_name)
    ):
        raise InvalidInputError("name", f"workspace {workspace_id} already has a pipeline named {pipeline_name!r}")
    folder = (
        get_or_create_folder(session, workspace_id=workspace_id, name=folder_name)
        if folder_name is not None
        else None
    )
    pipeline = Pipeline(
        workspace_id=workspace_id,
        connector_id=connector_id,
        name=pipeline_name,
        save_to_kb=save_to_kb,
        destination_folder_id=folder.id if folder else None,
        enabled=enabled,
        created_by=created_by or workspace.owner_user_id,
    )
    (retry or RetryPolicy()).apply_to(pipeline)
    session.add(pipeline)
    session.flush()
    if spec is not None:
        session.add(
            PipelineTrigger(
                workspace_id=workspace_id,
                pipeline_id=pipeline.id,
                kind=TriggerKind.SCHEDULE.value,
                cron=spec.cron,
                timezone=spec.timezone,
                interval_minutes=spec.every_minutes,
                next_fire_at=spec.next_fire_after(now or datetime.now(UTC)),
            )
        )
        session.flush()
    if connector_id is not None:
        reconcile_connector_indexing(session, connector_id, now=now)
    return pipeline


def get_pipeline(session: Session, *, workspace_id: int, pipeline_id: int) -> Pipeline:
    pipeline = session.get(Pipeline, pipeline_id)
    if pipeline is None or pipeline.workspace_id != workspace_id:
        raise NotFoundError(f"pipeline {pipeline_id} is not in workspace {workspace_id}")
    return pipeline


def set_pipeline_enabled(
    session: Session, *, workspace_id: int, pipeline_id: int, enabled: bool, now: datetime | None = None
) -> Pipeline:
    pipeline = get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    pipeline.enabled = enabled
    session.flush()
    if pipeline.connector_id is not None:
        reconcile_connector_indexing(session, pipeline.connector_id, now=now)
    return pipeline


def delete_pipeline(
    session: Session, *, workspace_id: int, pipeline_id: int, now: datetime | None = None
) -> None:
    pipeline = get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
    connector_id = pipeline.connector_id
    session.delete(pipeline)
    session.flush()
    if connector_id is not None:
        reconcile_connector_indexing(session, connector_id, now=now)
