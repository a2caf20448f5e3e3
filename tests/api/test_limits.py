"""Request limits at the edge, on the real server `pipelines-dagster api` runs on 127.0.0.1: headers past their
size or count answered 431, JSON bodies past their cap 413 before they are read, nothing stored either way."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import psutil
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import create_engine, session_factory, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import DomainEvent, WebhookDelivery
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.edge.server import api_command
from pipelines_dagster.mcp_server import MCP_PATH
from tests.api.conftest import REPO_DIR, free_port
from tests.support.processes import start_server, stop_group
from tests.support.raw_http import send_while_reading
from tests.support.webhooks import Webhook, create_webhook, standard_headers

MiB = 1024 * 1024
# Lower than the defaults, to see the settings read; the header size limit keeps its default.
MAX_BODY_BYTES = 64 * 1024
MAX_HEADERS = 50
DEFAULT_MAX_HEADER_BYTES = 64 * 1024


@dataclass(frozen=True)
class Api:
    port: int
    pid: int
    sessions: sessionmaker[Session]
    workspace_id: int
    token: str
    webhook: Webhook
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events(self) -> str:
        return f"{self.url}/workspaces/{self.workspace_id}/events"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stored(self, model: type) -> int:
        with self.sessions() as session:
            return session.scalar(sa.select(sa.func.count()).select_from(model)) or 0


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("edge")
    engine = create_engine(f"sqlite:///{root / 'app.sqlite3'}")
    upgrade(engine)
    sessions = session_factory(engine)
    with transaction(sessions) as session:
        made = create_workspace(session, name="edge", owner_user_id="edge")
        pipeline = create_pipeline(session, workspace_id=made.workspace.id, connector_id=None, name="p")
        webhook = create_webhook(session, workspace_id=made.workspace.id, pipeline_id=pipeline.id)
        workspace_id, token = made.workspace.id, made.api_token
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINES_", "DAGSTER_"))}
    env |= {
        "DAGSTER_HOME": str(root / "dagster-home"),
        "PIPELINES_DATA_DIR": str(root / "data"),
        "PIPELINES_DATABASE_URL": engine.url.render_as_string(hide_password=False),
        "PIPELINES_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "PIPELINES_MAX_HEADERS": str(MAX_HEADERS),
    }
    (root / "dagster-home").mkdir()
    port = free_port()
    server = start_server(
        api_command(port=port),
        env=env,
        cwd=REPO_DIR,
        log=root / "api.log",
        ready_url=f"http://127.0.0.1:{port}/openapi.json",
    )
    try:
        yield Api(port, server.pid, sessions, workspace_id, token, webhook, env)
    finally:
        stop_group(server)
        engine.dispose()


def test_a_header_over_the_limit_is_answered_431_before_the_client_has_sent_it(api: Api):
    head = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
    answer = send_while_reading(api.port, head, then=64 * MiB)
    assert answer.status == 431
    assert answer.detail == (
        f"the request line and headers are larger than {DEFAULT_MAX_HEADER_BYTES} bytes; send fewer or shorter headers"
    )
    assert answer.headers["connection"] == "close" and answer.closed
    # Answered when the limit was passed, not at the end: what was sent by then is what the kernels buffered.
    assert answer.sent < 16 * MiB


def test_eight_concurrent_64_mib_headers_leave_the_servers_memory_as_it_was(api: Api):
    server = psutil.Process(api.pid)
    assert httpx.get(f"{api.url}/openapi.json").status_code == 200
    before, peak, answers = server.memory_info().rss, 0, []
    head = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
    senders = [
        threading.Thread(target=lambda: answers.append(send_while_reading(api.port, head, then=64 * MiB)))
        for _ in range(8)
    ]
    for sender in senders:
        sender.start()
    while any(sender.is_alive() for sender in senders):
        peak = max(peak, server.memory_info().rss)
        time.sleep(0.005)
    assert [answer.status for answer in answers] == [431] * 8
    # Read in full, the headers would hold 512 MiB; bounded, each connection holds at most the limit and a read.
    assert peak - before < 16 * MiB, f"RSS {before / MiB:.0f} MiB → peak {peak / MiB:.0f} MiB"


def test_more_headers_than_the_limit_are_answered_431(api: Api):
    many = {f"x-h{n}": "1" for n in range(MAX_HEADERS + 1)}
    refused = httpx.get(f"{api.url}/openapi.json", headers=many)
    assert refused.status_code == 431
    assert refused.json() == {"detail": f"the request has more than {MAX_HEADERS} headers; send fewer"}
    assert refused.headers["connection"] == "close"
    some = {f"x-h{n}": "1" for n in range(MAX_HEADERS - 10)}
    assert httpx.get(f"{api.url}/openapi.json", headers=some).status_code == 200


def test_an_event_body_declared_over_the_cap_is_answered_413_before_it_is_sent(api: Api):
    before = api.stored(DomainEvent)
    head = (
        f"POST /workspaces/{api.workspace_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {api.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {50 * 1000 * 1000}\r\n\r\n"
    ).encode()
    answer = send_while_reading(api.port, head)
    assert answer.status == 413 and answer.sent == len(head)
    assert answer.detail == f"the request body is larger than {MAX_BODY_BYTES} bytes; send a smaller one"
    assert answer.closed
    # A client that sends it all anyway (httpx) reads the same answer.
    payload = {"event_type": "refresh.requested", "payload": {"text": "x" * (2 * MiB)}}
    sent = httpx.post(api.events, json=payload, headers=api.auth, timeout=30)
    assert sent.status_code == 413 and sent.json()["detail"] == answer.detail
    assert api.stored(DomainEvent) == before


def test_a_chunked_event_body_is_answered_413_once_it_passes_the_cap(api: Api):
    before = api.stored(DomainEvent)
    streamed: list[int] = []

    def endless() -> Iterator[bytes]:
        yield b'{"event_type": "refresh.requested", "payload": {"text": "'
        for _ in range(1000):
            streamed.append(1)
            yield b"x" * 64 * 1024

    refused = httpx.post(api.events, content=endless(), headers=api.auth | {"content-type": "application/json"})
    assert refused.status_code == 413
    assert refused.json()["detail"] == f"the request body is larger than {MAX_BODY_BYTES} bytes; send a smaller one"
    # Refused while the client was still sending: the rest of its 64 MB was never asked for.
    assert len(streamed) < 1000, len(streamed)
    assert api.stored(DomainEvent) == before


def test_events_within_the_cap_are_stored_whether_sized_or_chunked(api: Api):
    before = api.stored(DomainEvent)
    small = {"event_type": "refresh.requested", "payload": {"text": "x" * (MAX_BODY_BYTES - 1024)}}
    assert httpx.post(api.events, json=small, headers=api.auth).status_code == 202

    def pieces() -> Iterator[bytes]:
        yield b'{"event_type": "refresh.requested",'
        yield b' "payload": {"name": "a.pdf"}}'

    chunked = httpx.post(api.events, content=pieces(), headers=api.auth | {"content-type": "application/json"})
    assert chunked.status_code == 202, chunked.text
    assert api.stored(DomainEvent) == before + 2


def test_webhook_deliveries_keep_their_own_1_mib_cap(api: Api):
    before = api.stored(WebhookDelivery)
    hook = api.webhook
    body = b'{"text": "' + b"x" * (4 * MAX_BODY_BYTES) + b'"}'
    delivered = httpx.post(
        f"{api.url}{hook.path}", content=body, headers=standard_headers(hook.secret, body, at=datetime.now(UTC))
    )
    assert delivered.status_code == 202, delivered.text
    too_large = b"x" * (MiB + 1)
    refused = httpx.post(
        f"{api.url}{hook.path}",
        content=too_large,
        headers=standard_headers(hook.secret, too_large, webhook_id="msg_2", at=datetime.now(UTC)),
    )
    assert refused.status_code == 413 and refused.json()["detail"] == f"the body is larger than {MiB} bytes"
    assert api.stored(WebhookDelivery) == before + 1


def test_the_mcp_http_server_refuses_oversized_headers_and_bodies_the_same_way(api: Api, tmp_path):
    port = free_port()
    command = [api_command(port=port)[0], "mcp", "--http", "--host", "127.0.0.1", "--port", str(port)]
    # Without a token the MCP endpoint answers 401: it is up.
    ready = f"http://127.0.0.1:{port}{MCP_PATH}"
    server = start_server(
        command, env=api.env, cwd=REPO_DIR, log=tmp_path / "mcp.log", ready_url=ready, ready_status=401
    )
    try:
        head = f"POST {MCP_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ".encode()
        answer = send_while_reading(port, head, then=64 * MiB)
        assert answer.status == 431 and answer.closed and answer.sent < 16 * MiB
        many = {f"x-h{n}": "1" for n in range(MAX_HEADERS + 1)}
        assert httpx.post(ready, headers=many, json={}).status_code == 431
        sized = f"POST {MCP_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {50 * MiB}\r\n\r\n".encode()
        assert send_while_reading(port, sized).status == 413
    finally:
        stop_group(server)
