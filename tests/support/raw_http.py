"""HTTP/1.1 over a bare socket, for requests no client library would send: a header of many MiB, a body
declared but never sent."""

from __future__ import annotations

import json
import select
import socket
from dataclasses import dataclass

PIECE = 64 * 1024


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int
    """Bytes of the request sent when the answer came."""
    closed: bool
    """Whether the server closed the connection after answering."""

    @property
    def detail(self) -> str:
        return json.loads(self.body)["detail"]


def send_while_reading(port: int, head: bytes, *, then: int = 0, filler: bytes = b"a") -> Answer:
    """Send `head`, then up to `then` bytes of `filler` in 64 KiB pieces, stopping as soon as the server
    answers, as a careful client (curl) does; then read the answer to its end."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sent, piece = len(head), filler * (PIECE // len(filler))
        sock.setblocking(False)
        while sent < len(head) + then:
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable or not writable:
                break
            try:
                sent += sock.send(piece[: len(head) + then - sent])
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.setblocking(True)
        received, closed = b"", False
        while True:
            try:
                chunk = sock.recv(PIECE)
            except ConnectionResetError:
                # The server closed with the rest of the request unread, so its kernel reset the connection.
                closed = True
                break
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            received += chunk
            if _complete(received):
                sock.settimeout(5)
    assert received, f"no answer after {sent} bytes sent"
    head_part, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head_part.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return Answer(status=int(status_line.split()[1]), headers=headers, body=body, sent=sent, closed=closed)


def _complete(received: bytes) -> bool:
    head, found, body = received.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False
