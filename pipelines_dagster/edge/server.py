"""uvicorn as the API and the MCP server run it: h11, whose parser stops reading a request whose line and headers
pass PIPELINES_MAX_HEADER_BYTES (httptools, uvicorn's default when installed, reads headers of any size)."""

from __future__ import annotations

import asyncio
import http
import json
import sys
from pathlib import Path
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from pipelines_dagster.settings import Settings


class _Connection(h11.Connection):
    """h11's server side, keeping the status its parser advises for the request it refused: 431 when the
    request line and headers outgrew the limit, else 400."""

    refused_status = http.HTTPStatus.BAD_REQUEST

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refused_status = http.HTTPStatus(exc.error_status_hint)
            raise


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol answering headers past the limit 431 in the API's error shape, where uvicorn
    answers every parse error 400; either way the connection closes with the rest unread."""

    conn: _Connection

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        assert config.h11_max_incomplete_event_size is not None  # set by server_config
        self.conn = _Connection(h11.SERVER, max_incomplete_event_size=config.h11_max_incomplete_event_size)

    def send_400_response(self, msg: str) -> None:
        status = self.conn.refused_status
        if status is not http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
            super().send_400_response(msg)
            return
        limit = self.config.h11_max_incomplete_event_size
        detail = f"the request line and headers are larger than {limit} bytes; send fewer or shorter headers"
        body = json.dumps({"detail": detail}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=status, headers=headers, reason=status.phrase),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def server_config(app: ASGIApp, *, host: str, port: int, settings: Settings) -> Config:
    """The uvicorn config of an HTTP server of ours, its header size bounded by `settings`."""
    return Config(
        app,
        host=host,
        port=port,
        http=BoundedH11Protocol,
        h11_max_incomplete_event_size=settings.max_header_bytes,
    )


def serve(app: ASGIApp, *, host: str, port: int, settings: Settings) -> None:
    """Serve `app` on host:port until SIGINT or SIGTERM."""
    uvicorn.Server(server_config(app, host=host, port=port, settings=settings)).run()


def api_command(*, port: int, host: str = "127.0.0.1") -> list[str]:
    """The command line serving the API as a deployment does (`pipelines-dagster api`), for a bench or test that
    starts it in a process of its own; the environment's PIPELINES_* settings apply."""
    return [str(Path(sys.executable).with_name("pipelines-dagster")), "api", "--host", host, "--port", str(port)]
