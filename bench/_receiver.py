"""A webhook receiver for the notification benches: answers 204 to every POST on /hook/0 .. /hook/N-1
and counts what it got by webhook-id; GET /stats reports the counts, GET /ids the ids seen, and
POST /reset starts the counts afresh.

Run as a script (`_receiver.py serve PATHS PORT`) it is the server: uvicorn (httptools, uvloop) over
a raw ASGI app, in its own process so that its work is not counted as the sender's.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from _corpus import ServerProcess, serve_asgi


class Receiver(ServerProcess):
    """`_receiver.py serve` in a child process on 127.0.0.1, with `paths` hook paths."""

    name = "webhook receiver"

    def __init__(self, *, paths: int) -> None:
        super().__init__([sys.executable, str(Path(__file__).resolve()), "serve", str(paths)], ready_path="/stats")
        self.paths = paths

    def hook_url(self, number: int) -> str:
        return self.url(f"/hook/{number}")

    def _call(self, method: str, path: str) -> Any:
        with urllib.request.urlopen(urllib.request.Request(self.url(path), method=method), timeout=30) as answer:
            return json.load(answer)

    def stats(self) -> dict[str, Any]:
        """posts, unique (webhook-ids), duplicates, unsigned (posts without a webhook-signature),
        strays (posts to no hook path), per_path (posts on each), first_at and last_at (epoch
        seconds of the first and the latest post, or None)."""
        return self._call("GET", "/stats")

    def ids(self) -> set[str]:
        return set(self._call("GET", "/ids"))

    def reset(self) -> None:
        self._call("POST", "/reset")


def _serve(paths: int, port: int) -> None:

    hooks = {f"/hook/{number}": number for number in range(paths)}
    seen: Counter[bytes] = Counter()
    state: dict[str, Any] = {}

    def reset() -> None:
        seen.clear()
        state.update(posts=0, unsigned=0, strays=0, per_path=[0] * paths, first_at=None, last_at=None)

    reset()

    async def answer(send: Any, status: int, body: bytes = b"", content_type: bytes = b"application/json") -> None:
        headers = [(b"content-length", str(len(body)).encode("ascii"))]
        if body:
            headers.append((b"content-type", content_type))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:  # the body is not needed, but it must be read before answering on keep-alive
            more = (await receive()).get("more_body", False)
        path, method = scope["path"], scope["method"]
        if method == "POST" and path in hooks:
            now = time.time()
            headers = dict(scope["headers"])
            seen[headers.get(b"webhook-id", b"")] += 1
            state["posts"] += 1
            state["unsigned"] += b"webhook-signature" not in headers
            state["per_path"][hooks[path]] += 1
            state["first_at"] = state["first_at"] or now
            state["last_at"] = now
            await answer(send, 204)
        elif method == "GET" and path == "/stats":
            report = state | {"unique": len(seen), "duplicates": state["posts"] - len(seen)}
            await answer(send, 200, json.dumps(report).encode())
        elif method == "GET" and path == "/ids":
            await answer(send, 200, json.dumps([key.decode("latin-1") for key in seen]).encode())
        elif method == "POST" and path == "/reset":
            reset()
            await answer(send, 200, b"{}")
        else:
            state["strays"] += method == "POST"
            await answer(send, 404, b"not found", b"text/plain")

    serve_asgi(app, port)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        raise SystemExit(f"usage: {Path(sys.argv[0]).name} serve PATHS PORT")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    _serve(int(sys.argv[2]), int(sys.argv[3]))
