"""`create_app`: the FastAPI application over the app database, the Dagster instance and the blob store."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version

import dagster as dg
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from pipelines_dagster.api import (
    changes,
    connectors,
    costs,
    credits,
    documents,
    notifications,
    pipelines,
    runs,
    tokens,
    triggers,
)
from pipelines_dagster.api.deps import ApiServices
from pipelines_dagster.api.errors import install_error_handlers
from pipelines_dagster.api.operations import operation_id
from pipelines_dagster.app_db.engine import session_factory
from pipelines_dagster.app_db.migrate import current_engine
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.edge.limits import RequestLimits
from pipelines_dagster.history import RunHistory
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.launch import GraphQLLauncher, Launcher
from pipelines_dagster.notifications.sender import Sender
from pipelines_dagster.resources.deployment import build_resources
from pipelines_dagster.settings import Settings, load_settings

DESCRIPTION = """\
Pipelines, run-now and run history of one workspace of the knowledge base, and the
notifications its endpoints receive (the webhooks below: signed Standard Webhooks).

Authenticate with the workspace's API token: `Authorization: Bearer <token>`.
Every route lives under `/workspaces/{workspace_id}` and answers only for the
token's own workspace; any other workspace id answers 404.

Errors are JSON `{"detail": "<what went wrong and what to do>"}`; invalid input
answers 422 with `{"detail": [{"field": "schedule.timezone", "message": "..."}]}`,
one entry per field. Requests are bounded: headers over 64 KiB or 100 lines answer 431,
a body over 1 MiB 413 (the server's settings may differ), and the connection closes.
"""


DOCS_ASSETS_PATH = "/docs-assets"
_WEBHOOKS_PREFIX = "/webhooks/"
_WEBHOOK_PATH = re.compile(_WEBHOOKS_PREFIX + r"[^/?#\s]+")
REDACTED_WEBHOOK_PATH = "/webhooks/<redacted>"


def redact_webhook_tokens(text: str) -> str:
    """`text` with every /webhooks/{token} path's token replaced: a token names a trigger, so logs never hold one."""
    return _WEBHOOK_PATH.sub(REDACTED_WEBHOOK_PATH, text)


class RedactWebhookTokens(logging.Filter):
    """Takes webhook tokens out of uvicorn's access log lines (client, method, path, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_webhook_tokens(arg) if isinstance(arg, str) else arg for arg in record.args)
        record.msg = redact_webhook_tokens(str(record.msg))
        return True


def _redact_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(existing, RedactWebhookTokens) for existing in access.filters):
        access.addFilter(RedactWebhookTokens())


def create_app(
    *,
    settings: Settings | None = None,
    instance: dg.DagsterInstance | None = None,
    launcher: Launcher | None = None,
) -> FastAPI:
    """The API for a deployment; each part defaults to what the environment configures.

    Fails at once, with what to run, when the app database is not migrated.
    """
    settings = settings or load_settings()
    engine = current_engine(settings.resolved_database_url)
    owns_instance = instance is None
    if instance is None:
        instance = dagster_instance(settings)
        # Pooled connections, as dagster-webserver uses: dagster-postgres otherwise opens
        # one per statement (measured: history pages 37 ms unpooled, 12 ms pooled).
        instance.optimize_for_webserver(statement_timeout=15_000, pool_recycle=3600, max_overflow=20)
    sessions = session_factory(engine)
    # The backends are chosen where the Dagster resources choose them.
    resources = build_resources(settings)
    notification_guard = resources["notifications"].guard()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()
        if owns_instance:
            instance.dispose()

    # Swagger UI and ReDoc from the package's own copies of their assets, so /docs and /redoc work offline.
    app = FastAPIOffline(
        title="pipelines-dagster",
        version=version("pipelines-dagster"),
        description=DESCRIPTION,
        lifespan=lifespan,
        webhooks=notifications.messages,
        generate_unique_id_function=operation_id,
        static_url=DOCS_ASSETS_PATH,
    )
    app.state.services = ApiServices(
        sessions=sessions,
        instance=instance,
        # Run pages link to the Dagster UI: PIPELINES_DAGSTER_URL, the default webserver's when unset.
        history=RunHistory(instance, sessions, ui_base_url=settings.dagster_url),
        blob_store=resources["blob_store"].store(),
        launcher=launcher or GraphQLLauncher(settings.launch_url),
        site_max_pages_cap=settings.site_max_pages_cap,
        notification_guard=notification_guard,
        # Over the app's own sessions: the resource's sender would open an engine of its own.
        notification_sender=Sender(sessions, notification_guard),
        billing=Billing(sessions, enabled=settings.billing_enabled, micros_per_crawl=settings.micros_per_crawl),
        keyring=settings.keyring(),
    )
    install_error_handlers(app)
    app.add_middleware(
        RequestLimits,
        max_headers=settings.max_headers,
        max_body_bytes=settings.max_body_bytes,
        # A webhook delivery reads its raw body itself, under the webhook cap, so its signature covers it all.
        exempt_prefixes=(_WEBHOOKS_PREFIX,),
    )
    _redact_access_log()
    for router in (
        connectors.router,
        pipelines.router,
        runs.router,
        changes.router,
        costs.router,
        credits.router,
        documents.router,
        triggers.router,
        triggers.webhooks,
        notifications.router,
        tokens.router,
    ):
        app.include_router(router)
    return app
