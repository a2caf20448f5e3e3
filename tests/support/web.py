"""A real HTTP server on 127.0.0.1 with per-test routes, a fake DNS, and a net that keeps tests on loopback.

with WebServer() as web:
    web.route("/a", page("A", "text"), redirect("/b"))   # first request gets the page, later ones the redirect
    web.url("/a")                                        # http://127.0.0.1:<port>/a
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlsplit

import pytest

_CHUNK = 16 * 1024


@dataclass(frozen=True)
class Reply:
    """One response: status, body, headers, and how long to wait before answering.

    `chunked` sends the body with Transfer-Encoding: chunked, so no Content-Length announces its size.
    """

    status: int = 200
    body: bytes | str = b""
    content_type: str | None = "text/html; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunked: bool = False
    stream: Callable[[], Iterable[bytes]] | None = None
    """Pieces sent in place of `body`, made as they are sent (a body too large to hold); with no `chunked`,
    `headers` say its Content-Length, or the connection's close ends it."""


@dataclass(frozen=True)
class Request:
    """A request the server received; header names are lower-cased, `received_at` is time.monotonic()."""

    method: str
    path: str
    headers: Mapping[str, str]
    received_at: float = 0.0
    body: bytes = b""


Handler = Callable[[Request], Reply]


def html_document(title: str, text: str, *, lang: str = "en") -> str:
    """An HTML document with a title, a menu, and an article of `text` paragraphs (split on blank lines)."""
    paragraphs = "".join(f"<p>{paragraph}</p>" for paragraph in text.split("\n\n"))
    return (
        f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><nav><a href='/'>Home</a></nav><article><h1>{title}</h1>{paragraphs}</article></body></html>"
    )


def page(title: str, text: str, *, lang: str = "en", **reply: Any) -> Reply:
    """A Reply carrying html_document(title, text); `reply` sets the other Reply fields."""
    return Reply(body=html_document(title, text, lang=lang), **reply)


def redirect(location: str, *, status: int = 302) -> Reply:
    return Reply(status=status, headers={"Location": location}, content_type=None)


NOT_FOUND = Reply(status=404, body="not found", content_type="text/plain")


class WebServer:
    """A threaded HTTP/1.1 server (keep-alive) on an ephemeral loopback port.

    Routes are exact paths, the query string ignored; anything else is a 404. The server counts
    requests per path, connections, and the most requests it was serving at once. `host` is another
    loopback address to bind (127.0.0.2: a private address the network policy does not allow).
    """

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._routes: dict[str, Handler] = {}
        self._requests: list[Request] = []
        self._connections: list[socket.socket] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> WebServer:
        self._httpd = _HTTPServer(self)
        # A short poll interval, because stop() waits for the serving loop to notice it.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="test-web-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None or self._thread is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)  # wakes handlers parked on idle keep-alive connections
        self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> WebServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not running; call start() or use it as a context manager")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str, *, host: str | None = None) -> str:
        """This server's URL for `path`, optionally under another host name (for a fake resolver)."""
        return f"http://{host or self.host}:{self.port}{path}"

    def route(self, path: str, *replies: Reply) -> None:
        """Answer `path` with `replies` in turn; the last one repeats."""
        if not replies:
            raise ValueError("give at least one reply")
        queue = list(replies)

        def next_reply(_request: Request) -> Reply:
            with self._lock:
                return queue.pop(0) if len(queue) > 1 else queue[0]

        self._routes[path] = next_reply

    def handle(self, path: str, handler: Handler) -> None:
        """Answer `path` with whatever `handler` makes of each request (called on server threads)."""
        self._routes[path] = handler

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def hits(self, path: str) -> int:
        with self._lock:
            return sum(1 for request in self._requests if urlsplit(request.path).path == path)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._connections)

    @property
    def max_in_flight(self) -> int:
        with self._lock:
            return self._max_in_flight

    def _connected(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.append(connection)

    def _serve(self, handler: _RequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        request = Request(
            method=handler.command,
            path=handler.path,
            headers={name.lower(): value for name, value in handler.headers.items()},
            received_at=time.monotonic(),
            body=handler.rfile.read(length) if length else b"",
        )
        with self._lock:
            self._requests.append(request)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            reply = self._routes.get(urlsplit(request.path).path, lambda _request: NOT_FOUND)(request)
            if reply.delay and self._stopping.wait(reply.delay):
                return
            self._write(handler, reply)
        finally:
            with self._lock:
                self._in_flight -= 1

    @staticmethod
    def _write(handler: _RequestHandler, reply: Reply) -> None:
        body = reply.body.encode("utf-8") if isinstance(reply.body, str) else reply.body
        handler.send_response(reply.status)
        if reply.content_type is not None:
            handler.send_header("Content-Type", reply.content_type)
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        if reply.chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        elif reply.stream is None:
            handler.send_header("Content-Length", str(len(body)))
        else:
            handler.close_connection = "content-length" not in {name.lower() for name in reply.headers}
        handler.end_headers()
        pieces = (
            reply.stream()
            if reply.stream is not None
            else (body[at : at + _CHUNK] for at in range(0, len(body), _CHUNK))
        )
        for piece in pieces:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if reply.chunked else piece)
        if reply.chunked:
            handler.wfile.write(b"0\r\n\r\n")


class StaticResolver:
    """A fake DNS answering from a fixed table and recording each lookup; unknown names fail like NXDOMAIN."""

    def __init__(self, answers: Mapping[str, Sequence[str]]) -> None:
        self.answers = dict(answers)
        self.lookups: list[str] = []

    async def __call__(self, host: str) -> list[str]:
        self.lookups.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not in the test's fake DNS")
        return list(self.answers[host])


def confine_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make real DNS lookups (other than localhost) and TCP connections off loopback raise.

    A broken guard then fails its test with a connection error instead of sending a packet out.
    """
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode("ascii") if isinstance(host, bytes) else host
        if name is None or name == "localhost" or _is_address(name):
            return real_getaddrinfo(host, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, f"a test tried a real DNS lookup of {name!r}")

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            raise ConnectionRefusedError(f"a test tried to connect to {address[0]}, which is not loopback")
        real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)


def _is_address(name: str) -> bool:
    try:
        ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    try:
        return ip_address(name).is_loopback
    except ValueError:
        return False


class _RequestHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive, so tests can see whether the client reuses them.
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.web._connected(self.connection)

    def do_GET(self) -> None:
        self.server.web._serve(self)

    def do_POST(self) -> None:
        self.server.web._serve(self)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: pytest shows failures, not access logs."""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler parked on a keep-alive connection must not hold up the test run

    def __init__(self, web: WebServer) -> None:
        self.web = web
        super().__init__((web.host, 0), _RequestHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the bind address's FQDN: a DNS query tests must not make.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up first (a timeout or a size cap under test) is expected, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
