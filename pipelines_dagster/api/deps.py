"""What every route is given: the app's services, built once by `create_app`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import dagster as dg
from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.core.security.keyring import Keyring
from pipelines_dagster.core.storage.blob import BlobStore
from pipelines_dagster.history import RunHistory
from pipelines_dagster.launch import Launcher
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.sender import Sender


@dataclass(frozen=True, kw_only=True)
class ApiServices:
    sessions: sessionmaker[Session]
    instance: dg.DagsterInstance
    history: RunHistory
    blob_store: BlobStore
    launcher: Launcher
    site_max_pages_cap: int
    """The most pages a site crawl may be set to fetch (PIPELINES_SITE_MAX_PAGES_CAP)."""
    notification_guard: DestinationGuard
    """Where notification endpoints may point: where the crawler may go."""
    notification_sender: Sender
    """Sends a test message at once, over the app's own sessions."""
    billing: Billing
    keyring: Keyring
    """Seals the connector credentials a request gives (PIPELINES_SECRETS_KEY, or the data dir's key file)."""


def get_services(request: Request) -> ApiServices:
    services: ApiServices = request.app.state.services  # set by create_app
    return services


Api = Annotated[ApiServices, Depends(get_services)]
