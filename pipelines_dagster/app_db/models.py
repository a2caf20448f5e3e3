"""The app database: workspaces and what they own, billing, and lock leases.

Every workspace-owned row references its workspace with ON DELETE CASCADE, so
deleting a workspace leaves nothing behind. Run history is not here: it lives
in Dagster's run storage and event log.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.orm.attributes import set_committed_value

from pipelines_dagster.app_db.text import storable, storable_json

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both SQLite (which keeps no zone) and PostgreSQL."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use an aware UTC datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class StorableText(sa.TypeDecorator[str]):
    """TEXT for text from outside (crawled pages, what clients send), written without what
    PostgreSQL or its driver refuses (app_db/text.py), so both databases store the same."""

    impl: type[sa.String] = sa.Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> str | None:
        return None if value is None else storable(value)


class StorableString(StorableText):
    """StorableText in a VARCHAR of the given length."""

    impl = sa.String
    cache_ok = True


class StorableJSON(sa.TypeDecorator[Any]):
    """JSON from outside, every string in it (keys too) written as StorableText writes text."""

    impl = sa.JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        return storable_json(value)


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads this class attribute)
        datetime: UTCDateTime(),
        dict[str, Any]: sa.JSON(),
        # SQLite only autoincrements an INTEGER primary key.
        int: sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
    }


def _enum_check(column: str, enum_cls: type[enum.Enum]) -> sa.CheckConstraint:
    values = ", ".join(f"'{member.value}'" for member in enum_cls)
    return sa.CheckConstraint(f"{column} IN ({values})", name=f"{column}_valid")


def _workspace_fk() -> Mapped[int]:
    return mapped_column(sa.ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)


class ConnectorType(enum.StrEnum):
    WEBCRAWLER = "webcrawler"
    GOOGLE_DRIVE = "google_drive"
    ONEDRIVE = "onedrive"
    DROPBOX = "dropbox"


class TriggerKind(enum.StrEnum):
    SCHEDULE = "schedule"
    WEBHOOK = "webhook"
    EVENT = "event"
    MANUAL = "manual"


class WebhookSigning(enum.StrEnum):
    """How a webhook trigger's deliveries are signed."""

    STANDARD = "standard"
    """Standard Webhooks: id, timestamp and body signed under a per-trigger whsec_ secret."""
    GITHUB = "github"
    """X-Hub-Signature-256 over the body under the URL token, as GitHub sends."""


class RetryBackoff(enum.StrEnum):
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class DocumentState(enum.StrEnum):
    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


class PageChangeStatus(enum.StrEnum):
    NEW = "new"
    CHANGED = "changed"
    REMOVED = "removed"


class DeliveryStatus(enum.StrEnum):
    """Where a notification delivery stands."""

    PENDING = "pending"
    """Waiting for its next attempt (the first, or a retry)."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Out of attempts, or its endpoint was disabled; a redrive makes it pending again."""


class LedgerKind(enum.StrEnum):
    GRANT = "grant"
    CHARGE = "charge"


class HoldStatus(enum.StrEnum):
    """Where a credit hold stands."""

    OPEN = "open"
    """Reserving its micros: the account's available credit is its balance less its open holds."""
    SETTLED = "settled"
    """Its crawl was charged (what it succeeded at) and the rest given back, in the charge's transaction."""
    RELEASED = "released"
    """Given back uncharged: its run ended without a charge, or it expired."""


class Workspace(Base):
    __tablename__ = "workspaces"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(StorableString(200))
    owner_user_id: Mapped[str] = mapped_column(sa.String(200), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The hosts an operator declared the workspace owns (normalized names): its connectors may ignore robots.txt
    # there, and nowhere else.
    owned_hosts: Mapped[list[str]] = mapped_column(sa.JSON, default=list, server_default="[]")


class ApiToken(Base):
    """A workspace API token; only its SHA-256 is stored (tokens are 256-bit random). A workspace has several,
    told apart by name: unique among its live ones, so a revoked token's name can be given to its successor."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        sa.Index(
            "uq_api_tokens_live_name",
            "workspace_id",
            "name",
            unique=True,
            sqlite_where=sa.text("revoked_at IS NULL"),
            postgresql_where=sa.text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    name: Mapped[str] = mapped_column(StorableString(100))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    prefix: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class Folder(Base):
    __tablename__ = "folders"
    __table_args__ = (sa.UniqueConstraint("workspace_id", "parent_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    parent_id: Mapped[int | None] = mapped_column(sa.ForeignKey("folders.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(StorableString(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Connector(Base):
    __tablename__ = "connectors"
    __table_args__ = (_enum_check("connector_type", ConnectorType),)

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    name: Mapped[str] = mapped_column(StorableString(200))
    connector_type: Mapped[str] = mapped_column(sa.String(32))
    # For webcrawler connectors: {"INITIAL_URLS": ["https://...", ...]}.
    config: Mapped[dict[str, Any]] = mapped_column(StorableJSON, default=dict)
    # Credentials for a site behind a login, sealed under the deployment's secrets key, beside the names a reader
    # may see (core/catalog/connector_credentials.py). Apart from `config`, so what shows or copies a config
    # cannot take them along.
    credentials: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON(none_as_null=True))
    periodic_indexing_enabled: Mapped[bool] = mapped_column(default=False)
    indexing_frequency_minutes: Mapped[int | None]
    next_scheduled_at: Mapped[datetime | None]
    last_indexed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    pipelines: Mapped[list[Pipeline]] = relationship(back_populates="connector", passive_deletes=True)


class Pipeline(Base):
    __tablename__ = "pipelines"
    __table_args__ = (
        sa.UniqueConstraint("workspace_id", "name"),
        _enum_check("retry_backoff", RetryBackoff),
        sa.CheckConstraint("retry_max >= 0", name="retry_max_not_negative"),
        sa.CheckConstraint("retry_delay_seconds > 0", name="retry_delay_positive"),
        sa.CheckConstraint("max_runtime_seconds IS NULL OR max_runtime_seconds > 0", name="max_runtime_positive"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    # NULL for an uploads pipeline, which has no fetch executor.
    connector_id: Mapped[int | None] = mapped_column(sa.ForeignKey("connectors.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(StorableString(200))
    save_to_kb: Mapped[bool] = mapped_column(default=True)
    # NULL means the workspace root.
    destination_folder_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("folders.id", ondelete="SET NULL"), index=True
    )
    # Per-pipeline overrides of the connector config, e.g. INITIAL_URLS.
    config: Mapped[dict[str, Any]] = mapped_column(StorableJSON, default=dict)
    enabled: Mapped[bool] = mapped_column(default=True)
    created_by: Mapped[str | None] = mapped_column(sa.String(200))
    # The connector's own periodic indexing, expressed as a pipeline.
    system_managed: Mapped[bool] = mapped_column(default=False)
    # How a failed crawl step is retried: the delay before retry n (from 1) is
    # retry_delay_seconds * n when linear, retry_delay_seconds * 2**(n-1) when exponential.
    retry_backoff: Mapped[str] = mapped_column(
        sa.String(16), default=RetryBackoff.EXPONENTIAL.value, server_default=RetryBackoff.EXPONENTIAL.value
    )
    retry_max: Mapped[int] = mapped_column(sa.Integer, default=3, server_default="3")
    retry_delay_seconds: Mapped[float] = mapped_column(sa.Float, default=2.0, server_default="2")
    # How long one run may take before it is stopped (and continued by another, from what it stored);
    # NULL: the deployment's run_monitoring.max_runtime_seconds.
    max_runtime_seconds: Mapped[int | None] = mapped_column(sa.Integer)
    # The Celery queue its runs go to under the Celery profile, so heavy crawls can have workers of their own;
    # NULL: the run launcher's default queue.
    worker_queue: Mapped[str | None] = mapped_column(sa.String(64))
    # Its Dagster partition's key, set as it is inserted (`_give_partition_key`) and never changed; NULL for a
    # pipeline made before keys carried names, whose key is its bare id (see `partition`).
    partition_key: Mapped[str | None] = mapped_column(sa.String(64), index=True, unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    connector: Mapped[Connector | None] = relationship(back_populates="pipelines")
    triggers: Mapped[list[PipelineTrigger]] = relationship(back_populates="pipeline", passive_deletes=True)

    @property
    def partition(self) -> str:
        """The key of its partition of every pipeline asset."""
        return stored_partition(self.id, self.partition_key)


def stored_partition(pipeline_id: int, partition_key: str | None) -> str:
    """A pipeline's partition key from its row: the stored key, or the bare id of a pipeline made before keys
    carried names."""
    return partition_key or str(pipeline_id)


SLUG_LENGTH = 40
"""At most this many characters of a pipeline's name go into its partition key."""


def partition_key(pipeline_id: int, name: str) -> str:
    """The key a pipeline's partition gets when the pipeline is created: its id and its name as a slug,
    `17-northwind-docs`, so the Dagster UI's partition pickers say which pipeline a key is. The id comes
    first, so the key alone says whose it is (`runs.pipeline_id_of_partition`). It is stored with the
    pipeline and never changes: a rename leaves it, as Dagster keeps a partition's history under its key."""
    slug = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-")[:SLUG_LENGTH].strip("-")
    return f"{pipeline_id}-{slug}" if slug else str(pipeline_id)


@sa.event.listens_for(Pipeline, "after_insert")
def _give_partition_key(_mapper: sa.orm.Mapper[Pipeline], connection: sa.Connection, pipeline: Pipeline) -> None:
    """Every pipeline gets its partition key as it is inserted, whichever code made it: the key holds the id,
    which exists only once the row does, so it is written right after the insert, in the same transaction."""
    if pipeline.partition_key is not None:
        return
    key = partition_key(pipeline.id, pipeline.name)
    connection.execute(sa.update(Pipeline).where(Pipeline.id == pipeline.id).values(partition_key=key))
    set_committed_value(pipeline, "partition_key", key)


class PipelineTrigger(Base):
    __tablename__ = "pipeline_triggers"
    __table_args__ = (
        _enum_check("kind", TriggerKind),
        sa.CheckConstraint(
            "kind != 'schedule' OR (cron IS NOT NULL AND timezone IS NOT NULL"
            " AND interval_minutes IS NULL) OR (cron IS NULL AND interval_minutes IS NOT NULL)",
            name="schedule_has_cron_or_interval",
        ),
        sa.CheckConstraint("interval_minutes IS NULL OR interval_minutes > 0", name="interval_positive"),
        sa.CheckConstraint("(kind = 'event') = (event_type IS NOT NULL)", name="event_type_iff_event"),
        # NULL except on webhook triggers.
        _enum_check("signing", WebhookSigning),
        # NULL event types would count as distinct, so uniqueness is over coalesce().
        sa.Index(
            "uq_pipeline_triggers_identity",
            "workspace_id",
            "pipeline_id",
            "kind",
            sa.text("coalesce(event_type, '')"),
            unique=True,
        ),
        sa.Index("ix_pipeline_triggers_due", "kind", "enabled", "next_fire_at"),
        sa.Index(
            "ix_pipeline_triggers_awaiting_run",
            "id",
            sqlite_where=sa.text("awaiting_run_for IS NOT NULL"),
            postgresql_where=sa.text("awaiting_run_for IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    pipeline_id: Mapped[int] = mapped_column(sa.ForeignKey("pipelines.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    cron: Mapped[str | None] = mapped_column(sa.String(120))
    timezone: Mapped[str | None] = mapped_column(sa.String(64))
    interval_minutes: Mapped[int | None]
    next_fire_at: Mapped[datetime | None]
    last_fired_at: Mapped[datetime | None]
    # The scheduled_for of the fire claimed at last_fired_at, until a tick sees its run in Dagster:
    # what a tick that died after claiming it owes, offered again (core/triggers/scheduler.py).
    awaiting_run_for: Mapped[datetime | None]
    event_type: Mapped[str | None] = mapped_column(sa.String(64))
    # The URL token's SHA-256: it names the trigger and, in github mode, is the signing key.
    webhook_secret_hash: Mapped[str | None] = mapped_column(sa.String(64), unique=True)
    signing: Mapped[str | None] = mapped_column(sa.String(16))
    # Standard mode's whsec_ secrets, newest first: [{"secret": ..., "expires_at": ISO or null}].
    # A rotated-out secret verifies until its expires_at; HMAC needs the secret itself, not a hash.
    signing_secrets: Mapped[list[dict[str, Any]] | None] = mapped_column(sa.JSON)
    enabled: Mapped[bool] = mapped_column(default=True)
    disabled_reason: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    pipeline: Mapped[Pipeline] = relationship(back_populates="triggers")

    @classmethod
    def manual_of(cls, pipeline: Pipeline) -> PipelineTrigger:
        """A new enabled manual trigger of the pipeline (not yet added): what lets it be run by hand, from
        the API's or the CLI's run-now. Every pipeline is made with one."""
        return cls(
            workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, kind=TriggerKind.MANUAL.value, enabled=True
        )


def _pending_index(table: str) -> sa.Index:
    """The rows no run has been requested for yet, in id order: what a trigger sensor takes."""
    pending = sa.text("requested_at IS NULL")
    return sa.Index(f"ix_{table}_pending", "id", sqlite_where=pending, postgresql_where=pending)


def _awaiting_index(table: str) -> sa.Index:
    """The rows whose runs were requested and not yet seen, in id order: what a tick looks for lost runs in."""
    awaiting = sa.text("awaiting_run")
    return sa.Index(f"ix_{table}_awaiting_run", "id", sqlite_where=awaiting, postgresql_where=awaiting)


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        sa.UniqueConstraint("trigger_id", "dedupe_key"),
        _pending_index("webhook_deliveries"),
        _awaiting_index("webhook_deliveries"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    trigger_id: Mapped[int] = mapped_column(sa.ForeignKey("pipeline_triggers.id", ondelete="CASCADE"), index=True)
    dedupe_key: Mapped[str] = mapped_column(sa.String(200))
    payload: Mapped[bytes] = mapped_column(sa.LargeBinary)
    headers: Mapped[dict[str, Any]] = mapped_column(default=dict)
    received_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    # Set by the webhook sensor in the transaction that takes the row; NULL until then.
    requested_at: Mapped[datetime | None]
    # Taken for a run that no tick has seen in Dagster yet (core/triggers/queue.py).
    awaiting_run: Mapped[bool] = mapped_column(default=False, server_default=sa.false())


class WebhookBodyDigest(Base):
    """A body a github-mode trigger accepted, as its dedupe key: the replay guard of a mode that signs
    nothing but the body. Retention prunes the delivery and keeps this; it goes with its trigger."""

    __tablename__ = "webhook_body_digests"

    # The primary key is the uniqueness that refuses a replay, and the only index.
    trigger_id: Mapped[int] = mapped_column(sa.ForeignKey("pipeline_triggers.id", ondelete="CASCADE"), primary_key=True)
    dedupe_key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    # The delivery that brought the body, answered again to a replay; set in the transaction that
    # inserts the row, so no reader sees it NULL. Not a foreign key: the delivery is pruned first.
    delivery_id: Mapped[int | None]
    accepted_at: Mapped[datetime] = mapped_column(default=utcnow)


class DomainEvent(Base):
    __tablename__ = "domain_events"
    __table_args__ = (_pending_index("domain_events"), _awaiting_index("domain_events"))

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    event_type: Mapped[str] = mapped_column(sa.String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(StorableJSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Set by the event sensor in the transaction that takes the row; NULL until then.
    requested_at: Mapped[datetime | None]
    # Taken for runs that no tick has seen in Dagster yet (core/triggers/queue.py).
    awaiting_run: Mapped[bool] = mapped_column(default=False, server_default=sa.false())


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (
        _enum_check("status_state", DocumentState),
        # A pipeline's documents listed newest first, a page at a time.
        sa.Index("ix_documents_pipeline_id_id", "pipeline_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    folder_id: Mapped[int | None] = mapped_column(sa.ForeignKey("folders.id", ondelete="SET NULL"), index=True)
    connector_id: Mapped[int | None] = mapped_column(sa.ForeignKey("connectors.id", ondelete="SET NULL"), index=True)
    pipeline_id: Mapped[int | None] = mapped_column(sa.ForeignKey("pipelines.id", ondelete="SET NULL"), index=True)
    document_type: Mapped[str] = mapped_column(sa.String(32))
    url: Mapped[str | None] = mapped_column(StorableText)
    # sha256 of "{document_type}:{url}:{workspace_id}:{pipeline_id}" (core.kb.index.document_identity): one
    # document per URL per pipeline, so two pipelines over one URL keep one each, in their own folders.
    unique_identifier_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    title: Mapped[str | None] = mapped_column(StorableText)
    content: Mapped[str | None] = mapped_column(StorableText)
    content_hash: Mapped[str | None] = mapped_column(sa.String(64))
    document_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", StorableJSON, default=dict)
    status_state: Mapped[str] = mapped_column(sa.String(16), default=DocumentState.PENDING.value)
    status_reason: Mapped[str | None] = mapped_column(StorableText)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    # Set when a healthy crawl no longer covers the page (left the list or the site, or 404/410);
    # the row and its content are kept, and cleared when a later crawl stores the page again.
    archived_at: Mapped[datetime | None]
    # The crawl_results run whose crawl archived it.
    archived_by_run_id: Mapped[str | None] = mapped_column(sa.String(64))


class PageChange(Base):
    """Append-only timeline of a pipeline's pages: one row per page that appeared, changed or went away."""

    __tablename__ = "page_changes"
    __table_args__ = (
        _enum_check("status", PageChangeStatus),
        sa.Index("ix_page_changes_pipeline_id_id", "pipeline_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    pipeline_id: Mapped[int] = mapped_column(sa.ForeignKey("pipelines.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(StorableText)
    document_id: Mapped[int | None] = mapped_column(sa.ForeignKey("documents.id", ondelete="SET NULL"), index=True)
    # The crawl_results run whose blob was compared.
    run_id: Mapped[str] = mapped_column(sa.String(64))
    status: Mapped[str] = mapped_column(sa.String(16))
    previous_hash: Mapped[str | None] = mapped_column(sa.String(64))
    current_hash: Mapped[str | None] = mapped_column(sa.String(64))
    diff: Mapped[str | None] = mapped_column(StorableText)
    observed_at: Mapped[datetime] = mapped_column(default=utcnow)


class PageState(Base):
    """The last good observation of each page of a pipeline: what the next crawl is compared with."""

    __tablename__ = "page_states"
    __table_args__ = (sa.UniqueConstraint("pipeline_id", "url_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    pipeline_id: Mapped[int] = mapped_column(sa.ForeignKey("pipelines.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(StorableText)
    # sha256 of the URL: a unique index over unbounded text would hit PostgreSQL's btree row limit.
    url_hash: Mapped[str] = mapped_column(sa.String(64))
    # NULL once the page is removed; a later success makes it new again.
    content_hash: Mapped[str | None] = mapped_column(sa.String(64))
    # Normalized markdown of the last good crawl, kept so a change can be shown as a diff.
    content: Mapped[str | None] = mapped_column(StorableText)
    # The crawl run this row last took part in; a re-run over the same crawl appends nothing.
    run_id: Mapped[str] = mapped_column(sa.String(64))
    last_checked_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_changed_at: Mapped[datetime] = mapped_column(default=utcnow)


class CreditAccount(Base):
    """A workspace's crawl credit, held by its owner; balance in micro-credits."""

    __tablename__ = "credit_accounts"

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = mapped_column(sa.ForeignKey("workspaces.id", ondelete="CASCADE"), unique=True)
    owner_user_id: Mapped[str] = mapped_column(sa.String(200))
    balance_micros: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class CreditLedgerEntry(Base):
    """Append-only: grants are positive, charges negative; the key makes a charge happen once."""

    __tablename__ = "credit_ledger"
    __table_args__ = (_enum_check("kind", LedgerKind),)

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(sa.ForeignKey("credit_accounts.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    delta_micros: Mapped[int]
    idempotency_key: Mapped[str] = mapped_column(sa.String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CreditHold(Base):
    """Credit a run reserved before its first request, for what its crawl may spend at most.

    One per charge key (root run and partition), so a retried step or re-executed run finds the
    hold its first attempt placed; `run_id` is the run holding it now, whose end releases it.
    """

    __tablename__ = "credit_holds"
    __table_args__ = (
        _enum_check("status", HoldStatus),
        sa.CheckConstraint("micros >= 0", name="micros_not_negative"),
        # What a reservation sums: the open holds of one account.
        sa.Index(
            "ix_credit_holds_open",
            "account_id",
            sqlite_where=sa.text("status = 'open'"),
            postgresql_where=sa.text("status = 'open'"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(sa.ForeignKey("credit_accounts.id", ondelete="CASCADE"))
    idempotency_key: Mapped[str] = mapped_column(sa.String(255), unique=True)
    run_id: Mapped[str] = mapped_column(sa.String(64), index=True)
    micros: Mapped[int]
    status: Mapped[str] = mapped_column(sa.String(16), default=HoldStatus.OPEN.value)
    # An open hold past this no longer reserves anything: the backstop for a run nothing saw end.
    expires_at: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    closed_at: Mapped[datetime | None]


class TokenUsage(Base):
    __tablename__ = "token_usage"

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    user_id: Mapped[str] = mapped_column(sa.String(200))
    usage_type: Mapped[str] = mapped_column(sa.String(32))
    cost_micros: Mapped[int]
    call_details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    ledger_entry_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("credit_ledger.id", ondelete="CASCADE"), unique=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class NotificationEndpoint(Base):
    """Where a workspace wants to hear of its runs, page changes and credit: a URL that receives
    Standard Webhooks, subscribed to some event types, for all pipelines or some."""

    __tablename__ = "notification_endpoints"

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    url: Mapped[str] = mapped_column(StorableText)
    description: Mapped[str | None] = mapped_column(StorableString(200))
    event_types: Mapped[list[str]] = mapped_column(sa.JSON)
    # NULL: every pipeline of the workspace.
    pipeline_ids: Mapped[list[int] | None] = mapped_column(sa.JSON)
    # credits.low fires when a charge takes the balance from at least this to below it.
    credits_below_micros: Mapped[int | None]
    # Standard Webhooks secrets, newest first (core/security/signing.py): every live one signs.
    signing_secrets: Mapped[list[dict[str, Any]]] = mapped_column(sa.JSON)
    enabled: Mapped[bool] = mapped_column(default=True)
    disabled_reason: Mapped[str | None] = mapped_column(sa.Text)
    # Since the first failed attempt after the last success; NULL while deliveries succeed.
    failing_since: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class NotificationDelivery(Base):
    """One message to one endpoint, with the state of its delivery. The body is stored as sent, so
    every attempt and redrive sends the same bytes under the same `message_id` (webhook-id)."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        _enum_check("status", DeliveryStatus),
        # What made the message, once per endpoint: a sensor that sees a run end twice queues it once.
        sa.UniqueConstraint("endpoint_id", "dedupe_key"),
        # The sender's claim: pending deliveries by when they are due.
        sa.Index("ix_notification_deliveries_due", "status", "next_attempt_at"),
        sa.Index("ix_notification_deliveries_endpoint_id_id", "endpoint_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workspace_id: Mapped[int] = _workspace_fk()
    endpoint_id: Mapped[int] = mapped_column(sa.ForeignKey("notification_endpoints.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(sa.String(32))
    message_id: Mapped[str] = mapped_column(sa.String(64), unique=True)
    dedupe_key: Mapped[str] = mapped_column(sa.String(255))
    payload: Mapped[bytes] = mapped_column(sa.LargeBinary)
    status: Mapped[str] = mapped_column(sa.String(16), default=DeliveryStatus.PENDING.value)
    # Attempts since it was queued or last redriven: where the retry schedule stands.
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime | None]
    # A sender that claimed it holds it until then; one that died lets it go then.
    leased_until: Mapped[datetime | None]
    last_status_code: Mapped[int | None]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None]


class NotificationAttempt(Base):
    """The delivery log: one row per request sent (or refused before sending)."""

    __tablename__ = "notification_attempts"

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[int] = mapped_column(
        sa.ForeignKey("notification_deliveries.id", ondelete="CASCADE"), index=True
    )
    attempted_at: Mapped[datetime] = mapped_column(default=utcnow)
    status_code: Mapped[int | None]
    error: Mapped[str | None] = mapped_column(sa.Text)
    duration_ms: Mapped[int] = mapped_column(default=0)
    succeeded: Mapped[bool] = mapped_column(default=False)


class LockLease(Base):
    """The database backend of the `locks` resource: one row per held lock."""

    __tablename__ = "lock_leases"

    name: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(255))
    # Epoch milliseconds: compared as integers, identical on every backend.
    expires_at_ms: Mapped[int]


# Row ids are partition keys and run keys: SQLite must never hand a deleted row's id
# to a new row (PostgreSQL sequences never do), or a new pipeline would inherit an old
# one's runs and a new delivery or event would repeat an old run key, which Dagster skips.
for _table in Base.metadata.tables.values():
    if "id" in _table.columns:
        _table.dialect_options["sqlite"]["autoincrement"] = True
