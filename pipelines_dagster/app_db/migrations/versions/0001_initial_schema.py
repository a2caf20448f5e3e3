"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# The models' integer type: BIGINT, but INTEGER on SQLite, which autoincrements only that.
BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lock_leases",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("expires_at_ms", BIGINT, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_lock_leases")),
    )
    op.create_table(
        "workspaces",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner_user_id", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workspaces")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_workspaces_owner_user_id"), "workspaces", ["owner_user_id"], unique=False)
    op.create_table(
        "api_tokens",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_api_tokens_workspace_id_workspaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_api_tokens_workspace_id"), "api_tokens", ["workspace_id"], unique=False)
    op.create_table(
        "connectors",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("connector_type", sa.String(length=32), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("periodic_indexing_enabled", sa.Boolean(), nullable=False),
        sa.Column("indexing_frequency_minutes", BIGINT, nullable=True),
        sa.Column("next_scheduled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_indexed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "connector_type IN ('webcrawler', 'google_drive', 'onedrive', 'dropbox')",
            name=op.f("ck_connectors_connector_type_valid"),
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_connectors_workspace_id_workspaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connectors")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_connectors_workspace_id"), "connectors", ["workspace_id"], unique=False)
    op.create_table(
        "credit_accounts",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("owner_user_id", sa.String(length=200), nullable=False),
        sa.Column("balance_micros", BIGINT, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_credit_accounts_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_credit_accounts")),
        sa.UniqueConstraint("workspace_id", name=op.f("uq_credit_accounts_workspace_id")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "domain_events",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_domain_events_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_domain_events")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_domain_events_workspace_id"), "domain_events", ["workspace_id"], unique=False)
    op.create_table(
        "folders",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("parent_id", BIGINT, nullable=True),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["folders.id"], name=op.f("fk_folders_parent_id_folders"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_folders_workspace_id_workspaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_folders")),
        sa.UniqueConstraint("workspace_id", "parent_id", "name", name=op.f("uq_folders_workspace_id_parent_id_name")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_folders_parent_id"), "folders", ["parent_id"], unique=False)
    op.create_index(op.f("ix_folders_workspace_id"), "folders", ["workspace_id"], unique=False)
    op.create_table(
        "credit_ledger",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("account_id", BIGINT, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("delta_micros", BIGINT, nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('grant', 'charge')", name=op.f("ck_credit_ledger_kind_valid")),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["credit_accounts.id"],
            name=op.f("fk_credit_ledger_account_id_credit_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_credit_ledger")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_credit_ledger_idempotency_key")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_credit_ledger_account_id"), "credit_ledger", ["account_id"], unique=False)
    op.create_table(
        "pipelines",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("connector_id", BIGINT, nullable=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("save_to_kb", sa.Boolean(), nullable=False),
        sa.Column("destination_folder_id", BIGINT, nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=True),
        sa.Column("system_managed", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["connector_id"], ["connectors.id"], name=op.f("fk_pipelines_connector_id_connectors"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["destination_folder_id"],
            ["folders.id"],
            name=op.f("fk_pipelines_destination_folder_id_folders"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_pipelines_workspace_id_workspaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipelines")),
        sa.UniqueConstraint("workspace_id", "name", name=op.f("uq_pipelines_workspace_id_name")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_pipelines_connector_id"), "pipelines", ["connector_id"], unique=False)
    op.create_index(op.f("ix_pipelines_destination_folder_id"), "pipelines", ["destination_folder_id"], unique=False)
    op.create_index(op.f("ix_pipelines_workspace_id"), "pipelines", ["workspace_id"], unique=False)
    op.create_table(
        "documents",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("folder_id", BIGINT, nullable=True),
        sa.Column("connector_id", BIGINT, nullable=True),
        sa.Column("pipeline_id", BIGINT, nullable=True),
        sa.Column("document_type", sa.String(length=32), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("unique_identifier_hash", sa.String(length=64), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("status_state", sa.String(length=16), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status_state IN ('pending', 'ready', 'failed')", name=op.f("ck_documents_status_state_valid")
        ),
        sa.ForeignKeyConstraint(
            ["connector_id"], ["connectors.id"], name=op.f("fk_documents_connector_id_connectors"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["folder_id"], ["folders.id"], name=op.f("fk_documents_folder_id_folders"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["pipeline_id"], ["pipelines.id"], name=op.f("fk_documents_pipeline_id_pipelines"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_documents_workspace_id_workspaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_documents")),
        sa.UniqueConstraint("unique_identifier_hash", name=op.f("uq_documents_unique_identifier_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_documents_connector_id"), "documents", ["connector_id"], unique=False)
    op.create_index(op.f("ix_documents_folder_id"), "documents", ["folder_id"], unique=False)
    op.create_index(op.f("ix_documents_pipeline_id"), "documents", ["pipeline_id"], unique=False)
    op.create_index(op.f("ix_documents_workspace_id"), "documents", ["workspace_id"], unique=False)
    op.create_table(
        "pipeline_triggers",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("pipeline_id", BIGINT, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("cron", sa.String(length=120), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=True),
        sa.Column("interval_minutes", BIGINT, nullable=True),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("event_type", sa.String(length=64), nullable=True),
        sa.Column("webhook_secret_hash", sa.String(length=64), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(kind = 'event') = (event_type IS NOT NULL)", name=op.f("ck_pipeline_triggers_event_type_iff_event")
        ),
        sa.CheckConstraint(
            "kind != 'schedule' OR (cron IS NOT NULL AND timezone IS NOT NULL AND interval_minutes IS NULL) "
            "OR (cron IS NULL AND interval_minutes IS NOT NULL)",
            name=op.f("ck_pipeline_triggers_schedule_has_cron_or_interval"),
        ),
        sa.CheckConstraint(
            "kind IN ('schedule', 'webhook', 'event', 'manual')", name=op.f("ck_pipeline_triggers_kind_valid")
        ),
        sa.CheckConstraint(
            "interval_minutes IS NULL OR interval_minutes > 0", name=op.f("ck_pipeline_triggers_interval_positive")
        ),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_pipeline_triggers_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_pipeline_triggers_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipeline_triggers")),
        sa.UniqueConstraint("webhook_secret_hash", name=op.f("uq_pipeline_triggers_webhook_secret_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_pipeline_triggers_due", "pipeline_triggers", ["kind", "enabled", "next_fire_at"], unique=False)
    op.create_index(op.f("ix_pipeline_triggers_pipeline_id"), "pipeline_triggers", ["pipeline_id"], unique=False)
    op.create_index(op.f("ix_pipeline_triggers_workspace_id"), "pipeline_triggers", ["workspace_id"], unique=False)
    # NULL event types would count as distinct, so uniqueness is over coalesce().
    op.create_index(
        "uq_pipeline_triggers_identity",
        "pipeline_triggers",
        ["workspace_id", "pipeline_id", "kind", sa.text("coalesce(event_type, '')")],
        unique=True,
    )
    op.create_table(
        "token_usage",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("usage_type", sa.String(length=32), nullable=False),
        sa.Column("cost_micros", BIGINT, nullable=False),
        sa.Column("call_details", sa.JSON(), nullable=False),
        sa.Column("ledger_entry_id", BIGINT, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["ledger_entry_id"],
            ["credit_ledger.id"],
            name=op.f("fk_token_usage_ledger_entry_id_credit_ledger"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_token_usage_workspace_id_workspaces"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_token_usage")),
        sa.UniqueConstraint("ledger_entry_id", name=op.f("uq_token_usage_ledger_entry_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_token_usage_workspace_id"), "token_usage", ["workspace_id"], unique=False)
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("workspace_id", BIGINT, nullable=False),
        sa.Column("trigger_id", BIGINT, nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trigger_id"],
            ["pipeline_triggers.id"],
            name=op.f("fk_webhook_deliveries_trigger_id_pipeline_triggers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_webhook_deliveries_workspace_id_workspaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("trigger_id", "dedupe_key", name=op.f("uq_webhook_deliveries_trigger_id_dedupe_key")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_webhook_deliveries_received_at"), "webhook_deliveries", ["received_at"], unique=False)
    op.create_index(op.f("ix_webhook_deliveries_trigger_id"), "webhook_deliveries", ["trigger_id"], unique=False)
    op.create_index(op.f("ix_webhook_deliveries_workspace_id"), "webhook_deliveries", ["workspace_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_webhook_deliveries_workspace_id"), table_name="webhook_deliveries")
    op.drop_index(op.f("ix_webhook_deliveries_trigger_id"), table_name="webhook_deliveries")
    op.drop_index(op.f("ix_webhook_deliveries_received_at"), table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index(op.f("ix_token_usage_workspace_id"), table_name="token_usage")
    op.drop_table("token_usage")
    op.drop_index(op.f("ix_pipeline_triggers_workspace_id"), table_name="pipeline_triggers")
    op.drop_index(op.f("ix_pipeline_triggers_pipeline_id"), table_name="pipeline_triggers")
    op.drop_index("ix_pipeline_triggers_due", table_name="pipeline_triggers")
    op.drop_index("uq_pipeline_triggers_identity", table_name="pipeline_triggers")
    op.drop_table("pipeline_triggers")
    op.drop_index(op.f("ix_documents_workspace_id"), table_name="documents")
    op.drop_index(op.f("ix_documents_pipeline_id"), table_name="documents")
    op.drop_index(op.f("ix_documents_folder_id"), table_name="documents")
    op.drop_index(op.f("ix_documents_connector_id"), table_name="documents")
    op.drop_table("documents")
    op.drop_index(op.f("ix_pipelines_workspace_id"), table_name="pipelines")
    op.drop_index(op.f("ix_pipelines_destination_folder_id"), table_name="pipelines")
    op.drop_index(op.f("ix_pipelines_connector_id"), table_name="pipelines")
    op.drop_table("pipelines")
    op.drop_index(op.f("ix_credit_ledger_account_id"), table_name="credit_ledger")
    op.drop_table("credit_ledger")
    op.drop_index(op.f("ix_folders_workspace_id"), table_name="folders")
    op.drop_index(op.f("ix_folders_parent_id"), table_name="folders")
    op.drop_table("folders")
    op.drop_index(op.f("ix_domain_events_workspace_id"), table_name="domain_events")
    op.drop_table("domain_events")
    op.drop_table("credit_accounts")
    op.drop_index(op.f("ix_connectors_workspace_id"), table_name="connectors")
    op.drop_table("connectors")
    op.drop_index(op.f("ix_api_tokens_workspace_id"), table_name="api_tokens")
    op.drop_table("api_tokens")
    op.drop_index(op.f("ix_workspaces_owner_user_id"), table_name="workspaces")
    op.drop_table("workspaces")
    op.drop_table("lock_leases")
