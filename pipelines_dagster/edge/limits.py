"""Header count and body size limits of every HTTP request, refused before the app reads the body."""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def refuse(send: Send, status: int, detail: str) -> None:
    """Answer `{"detail": ...}`, the API's error shape, and close the connection: the rest of an oversized
    request is never read."""
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class RequestLimits:
    """ASGI middleware: a request with more than `max_headers` headers is answered 431, one whose body is over
    `max_body_bytes` 413, by its Content-Length before any of it is read, or once a chunked body passes the cap
    (holding at most the cap). Paths under `exempt_prefixes` read and cap their bodies themselves."""

    app: ASGIApp
    max_headers: int
    max_body_bytes: int
    exempt_prefixes: tuple[str, ...] = ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        # The server has read them by now, within its header size limit; this bounds what the app is handed.
        if len(headers) > self.max_headers:
            await refuse(send, 431, f"the request has more than {self.max_headers} headers; send fewer")
            return
        if scope["path"].startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        declared = next((value for name, value in headers if name == b"content-length"), b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await refuse(send, 413, self._too_large)
            return
        if not any(name == b"transfer-encoding" for name, _ in headers):
            # The server delivers no more than a Content-Length declares, and no body without one.
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        size = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                await refuse(send, 413, self._too_large)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)

    @property
    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_body_bytes} bytes; send a smaller one"
