"""Migrations and the constraints the product relies on, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from pipelines_dagster.app_db.engine import create_engine, transaction
from pipelines_dagster.app_db.migrate import (
    MIGRATIONS_DIR,
    VERSIONS_DIR,
    DatabaseNotReadyError,
    current_revision,
    head_revision,
    require_current,
    upgrade,
)
from pipelines_dagster.app_db.models import (
    ApiToken,
    Base,
    Connector,
    CreditAccount,
    CreditHold,
    CreditLedgerEntry,
    Document,
    DomainEvent,
    Folder,
    NotificationAttempt,
    NotificationDelivery,
    NotificationEndpoint,
    PageChange,
    PageState,
    Pipeline,
    PipelineTrigger,
    TokenUsage,
    WebhookBodyDigest,
    WebhookDelivery,
    Workspace,
    utcnow,
)
from pipelines_dagster.core.kb.index import document_identity


def test_each_migration_is_named_after_its_revision_and_revises_the_one_before():
    # head_revision reads the newest file name, so a command's schema check imports no Alembic: that holds
    # only while the migrations are one line, each named by its revision.
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    scripts = ScriptDirectory.from_config(config)
    chain = list(reversed(list(scripts.walk_revisions())))
    assert [Path(script.path).name.partition("_")[0] for script in chain] == [script.revision for script in chain]
    assert [script.down_revision for script in chain] == [None, *(script.revision for script in chain[:-1])]
    assert len(chain) == len(list(VERSIONS_DIR.glob("*.py")))
    assert head_revision() == scripts.get_current_head() == chain[-1].revision


def test_current_revision_reads_what_alembic_recorded(app_engine):
    with app_engine.connect() as conn:
        assert current_revision(app_engine) == MigrationContext.configure(conn).get_current_revision()


def test_a_database_behind_the_code_is_refused_with_what_to_run(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'behind.sqlite3'}")
    with pytest.raises(DatabaseNotReadyError, match="has no tables yet; run `pipelines-dagster db upgrade` first"):
        require_current(engine)
    upgrade(engine, "0010")
    with pytest.raises(DatabaseNotReadyError, match="is at revision 0010; run `pipelines-dagster db upgrade` first"):
        require_current(engine)
    upgrade(engine)
    require_current(engine)


def test_upgrade_of_an_empty_sqlite_database_reaches_head(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'fresh.sqlite3'}")
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert set(sa.inspect(engine).get_table_names()) >= set(Base.metadata.tables)


def test_upgrade_of_an_empty_postgres_database_reaches_head(postgres_url):
    admin = sa.create_engine(
        sa.make_url(postgres_url).set(drivername="postgresql+psycopg2"), isolation_level="AUTOCOMMIT"
    )
    name = f"pd_fresh_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        engine = create_engine(sa.make_url(postgres_url).set(database=name).render_as_string(hide_password=False))
        assert current_revision(engine) is None
        upgrade(engine)
        assert current_revision(engine) == head_revision()
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


def test_migrations_match_the_models(app_engine):
    with app_engine.connect() as conn, warnings.catch_warnings():
        # Expression indexes cannot be reflected; the uniqueness tests below cover them.
        warnings.simplefilter("ignore")
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


@pytest.fixture
def pipeline(sessions) -> Pipeline:
    with transaction(sessions) as session:
        workspace = Workspace(name="acme", owner_user_id="user-1")
        session.add(workspace)
        session.flush()
        connector = Connector(
            workspace_id=workspace.id,
            name="web",
            connector_type="webcrawler",
            config={"INITIAL_URLS": ["https://example.com"]},
        )
        session.add(connector)
        session.flush()
        made = Pipeline(workspace_id=workspace.id, connector_id=connector.id, name=f"p-{uuid.uuid4().hex[:6]}")
        session.add(made)
        session.flush()
        return made


def insert_twice(sessions, make) -> None:
    with transaction(sessions) as session:
        session.add(make())
    with pytest.raises(sa.exc.IntegrityError), transaction(sessions) as session:
        session.add(make())


def test_document_identity_is_unique(sessions, pipeline):
    identity = document_identity("https://example.com", workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id)
    insert_twice(
        sessions,
        lambda: Document(
            workspace_id=pipeline.workspace_id,
            pipeline_id=pipeline.id,
            document_type="CRAWLED_URL",
            url="https://example.com",
            unique_identifier_hash=identity,
        ),
    )


def test_a_pipeline_has_one_trigger_per_kind_even_without_an_event_type(sessions, pipeline):
    insert_twice(
        sessions, lambda: PipelineTrigger(workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, kind="webhook")
    )


def test_event_triggers_are_unique_per_event_type(sessions, pipeline):
    def event(event_type: str) -> PipelineTrigger:
        return PipelineTrigger(
            workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, kind="event", event_type=event_type
        )

    with transaction(sessions) as session:
        session.add_all([event("connector.urls_changed"), event("document.uploaded")])
    insert_twice(sessions, lambda: event("refresh.requested"))


def test_schedule_triggers_need_cron_with_timezone_or_an_interval(sessions, pipeline):
    with pytest.raises(sa.exc.IntegrityError), transaction(sessions) as session:
        session.add(
            PipelineTrigger(
                workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, kind="schedule", cron="* * * * *"
            )
        )


def test_ledger_idempotency_key_is_unique(sessions, pipeline):
    with transaction(sessions) as session:
        account = CreditAccount(workspace_id=pipeline.workspace_id, owner_user_id="user-1")
        session.add(account)
        session.flush()
        account_id = account.id
    key = f"run:{uuid.uuid4()}:{pipeline.id}"
    insert_twice(
        sessions,
        lambda: CreditLedgerEntry(account_id=account_id, kind="charge", delta_micros=-1000, idempotency_key=key),
    )


def test_webhook_delivery_dedupe_key_is_unique_per_trigger(sessions, pipeline):
    with transaction(sessions) as session:
        trigger = PipelineTrigger(workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, kind="webhook")
        session.add(trigger)
        session.flush()
        trigger_id = trigger.id
    insert_twice(
        sessions,
        lambda: WebhookDelivery(
            workspace_id=pipeline.workspace_id, trigger_id=trigger_id, dedupe_key="delivery-1", payload=b"{}"
        ),
    )


def test_a_webhook_body_digest_is_unique_per_trigger(sessions, pipeline):
    with transaction(sessions) as session:
        trigger = PipelineTrigger(workspace_id=pipeline.workspace_id, pipeline_id=pipeline.id, kind="webhook")
        session.add(trigger)
        session.flush()
        trigger_id = trigger.id
    insert_twice(sessions, lambda: WebhookBodyDigest(trigger_id=trigger_id, dedupe_key="sha256:ab", delivery_id=1))


def test_deleting_a_workspace_leaves_nothing_behind(sessions, pipeline):
    ws = pipeline.workspace_id
    with transaction(sessions) as session:
        folder = Folder(workspace_id=ws, name="Docs")
        session.add(folder)
        session.flush()
        session.add(Folder(workspace_id=ws, parent_id=folder.id, name="Sub"))
        trigger = PipelineTrigger(workspace_id=ws, pipeline_id=pipeline.id, kind="webhook")
        account = CreditAccount(workspace_id=ws, owner_user_id="user-1", balance_micros=5)
        session.add_all(
            [trigger, account, ApiToken(workspace_id=ws, name="default", token_hash=uuid.uuid4().hex, prefix="pdk_")]
        )
        session.flush()
        entry = CreditLedgerEntry(
            account_id=account.id, kind="grant", delta_micros=5, idempotency_key=f"g-{uuid.uuid4()}"
        )
        session.add(entry)
        hold = CreditHold(
            account_id=account.id, idempotency_key=f"h-{uuid.uuid4()}", run_id="r", micros=5, expires_at=utcnow()
        )
        session.add(hold)
        endpoint = NotificationEndpoint(
            workspace_id=ws, url="https://hooks.example.com/", event_types=["run.failed"], signing_secrets=[]
        )
        session.add(endpoint)
        session.flush()
        delivery = NotificationDelivery(
            workspace_id=ws,
            endpoint_id=endpoint.id,
            event_type="run.failed",
            message_id=f"msg_{uuid.uuid4().hex}",
            dedupe_key="k",
            payload=b"{}",
        )
        session.add(delivery)
        session.flush()
        session.add(NotificationAttempt(delivery_id=delivery.id, status_code=500))
        session.add_all(
            [
                WebhookDelivery(workspace_id=ws, trigger_id=trigger.id, dedupe_key="d", payload=b"{}"),
                WebhookBodyDigest(trigger_id=trigger.id, dedupe_key="d", delivery_id=1),
                DomainEvent(workspace_id=ws, event_type="refresh.requested"),
                Document(
                    workspace_id=ws,
                    folder_id=folder.id,
                    pipeline_id=pipeline.id,
                    document_type="CRAWLED_URL",
                    unique_identifier_hash=uuid.uuid4().hex,
                ),
                TokenUsage(
                    workspace_id=ws, user_id="user-1", usage_type="web_crawl", cost_micros=1, ledger_entry_id=entry.id
                ),
                PageChange(
                    workspace_id=ws,
                    pipeline_id=pipeline.id,
                    url="https://example.com",
                    run_id="r",
                    status="new",
                    current_hash="h",
                ),
                PageState(
                    workspace_id=ws,
                    pipeline_id=pipeline.id,
                    url="https://example.com",
                    url_hash="u",
                    content_hash="h",
                    run_id="r",
                ),
            ]
        )
    with transaction(sessions) as session:
        session.execute(sa.delete(Workspace).where(Workspace.id == ws))
    owned = [
        ApiToken,
        Folder,
        Connector,
        Pipeline,
        PipelineTrigger,
        WebhookDelivery,
        DomainEvent,
        Document,
        CreditAccount,
        TokenUsage,
        PageChange,
        PageState,
        NotificationEndpoint,
        NotificationDelivery,
    ]
    with sessions() as session:
        for model in owned:
            left = session.scalar(sa.select(sa.func.count()).select_from(model).where(model.workspace_id == ws))
            assert left == 0, model.__tablename__
        assert session.get(CreditLedgerEntry, entry.id) is None
        assert session.get(CreditHold, hold.id) is None
        assert session.scalar(sa.select(sa.func.count()).select_from(NotificationAttempt)) == 0
        digests = sa.select(sa.func.count()).select_from(WebhookBodyDigest)
        assert session.scalar(digests.where(WebhookBodyDigest.trigger_id == trigger.id)) == 0
    # Every table but the lock leases (not workspace data) is covered above.
    covered = {
        "credit_ledger",
        "credit_holds",
        "notification_attempts",
        "webhook_body_digests",
        "workspaces",
        "lock_leases",
    }
    assert {m.__tablename__ for m in owned} | covered == set(Base.metadata.tables)


def test_a_deleted_rows_id_is_never_reused(sessions, pipeline):
    """Pipeline ids are partition keys and delivery ids are sensor cursors: reuse would mix up runs."""
    with transaction(sessions) as session:
        session.execute(sa.delete(Pipeline).where(Pipeline.id == pipeline.id))
    with transaction(sessions) as session:
        again = Pipeline(workspace_id=pipeline.workspace_id, name="after delete")
        session.add(again)
        session.flush()
        assert again.id > pipeline.id
