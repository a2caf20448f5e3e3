"""Notifications as a Dagster resource: where their links point, where they may be sent, and the sender.

The destination guard is the crawler's network policy: notifications go where the crawler may go.
The sender (and httpx with it) is imported when it is first asked for, not with the code location.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field
from sqlalchemy.orm import Session

from pipelines_dagster.notifications.events import queue_pages_changed
from pipelines_dagster.resources.app_db import AppDatabaseResource
from pipelines_dagster.resources.network import NetworkAccess

if TYPE_CHECKING:
    from pipelines_dagster.notifications.destination import DestinationGuard
    from pipelines_dagster.notifications.sender import Sender


class NotificationsResource(dg.ConfigurableResource["NotificationsResource"]):
    app_db: AppDatabaseResource
    api_url: str | None = Field(
        default=None, description="The HTTP API's address, the base of the change links in pages.changed."
    )
    dagster_url: str | None = Field(default=None, description="The Dagster UI's address, the base of run links.")
    network: NetworkAccess = Field(
        default_factory=NetworkAccess, description="Where notifications may be sent: where the crawler may connect."
    )

    def guard(self) -> DestinationGuard:
        from pipelines_dagster.notifications.destination import DestinationGuard

        return DestinationGuard(self.network.policy())

    def sender(self) -> Sender:
        from pipelines_dagster.notifications.sender import Sender

        return Sender(self.app_db.sessions, self.guard())

    def pages_changed(self, *, workspace_id: int, pipeline_id: int, run_id: str) -> Callable[[Session], object]:
        """What queues pages.changed for a crawl's changes, in the transaction that records them."""

        def notify(session: Session) -> object:
            return queue_pages_changed(
                session, workspace_id=workspace_id, pipeline_id=pipeline_id, run_id=run_id, api_url=self.api_url
            )

        return notify
