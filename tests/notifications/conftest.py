"""Notifications against real parts: the app database on each backend, and a receiver on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks.webhooks import Webhook

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Workspace
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.notifications.destination import DestinationGuard
from pipelines_dagster.notifications.endpoints import NewEndpoint, create_endpoint
from pipelines_dagster.notifications.sender import Sender
from tests.support.web import Reply, Request, WebServer

LOOPBACK = NetworkPolicy(allowed_networks=("127.0.0.1/32",))
HOOK = "/hook"


@dataclass
class Clock:
    """The sender's idea of now, moved by the test: retry schedules of hours pass at once."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime.now(UTC))


@pytest.fixture
def receiver() -> Iterator[WebServer]:
    """Answers 204 to every notification on /hook, unless a test routes it otherwise."""
    with WebServer() as server:
        server.route(HOOK, Reply(status=204, content_type=None))
        yield server


@pytest.fixture
def workspace(sessions: sessionmaker[Session]) -> Iterator[int]:
    """A workspace, deleted with its endpoints and deliveries afterwards: a sender sends whatever is
    due in the database, and the PostgreSQL one lives as long as the test session."""
    with transaction(sessions) as session:
        workspace_id = create_workspace(session, name="Acme", owner_user_id="user-1").workspace.id
    yield workspace_id
    with transaction(sessions) as session:
        session.execute(sa.delete(Workspace).where(Workspace.id == workspace_id))


def endpoint(
    sessions: sessionmaker[Session], workspace_id: int, url: str, *, events: list[str] | None = None, **fields: Any
) -> NewEndpoint:
    with transaction(sessions) as session:
        return create_endpoint(
            session,
            DestinationGuard(LOOPBACK),
            workspace_id=workspace_id,
            url=url,
            event_types=events or ["run.succeeded", "run.failed"],
            **fields,
        )


def sender(sessions: sessionmaker[Session], clock: Clock, **options: Any) -> Sender:
    return Sender(sessions, DestinationGuard(LOOPBACK), clock=clock, **options)


def posts(server: WebServer, path: str = HOOK) -> list[Request]:
    return [request for request in server.requests if request.method == "POST" and request.path == path]


def signed_by(request: Request, secret: str) -> bool:
    """Whether one of a notification's signatures is `secret`'s, by the reference library's signing,
    whatever its timestamp (a test's clock may be hours ahead of the receiver's)."""
    stamp = datetime.fromtimestamp(int(request.headers["webhook-timestamp"]), UTC)
    expected = Webhook(secret).sign(request.headers["webhook-id"], stamp, request.body.decode())
    return expected in request.headers["webhook-signature"].split()


def verified(request: Request, secret: str) -> dict[str, Any]:
    """The body of a received notification, after checking its signature as any Standard Webhooks
    receiver does (the reference library; it also refuses a timestamp off by more than 5 minutes)."""
    headers = {name: request.headers[name] for name in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    message: dict[str, Any] = Webhook(secret).verify(request.body, headers)
    assert message == json.loads(request.body)
    return message
