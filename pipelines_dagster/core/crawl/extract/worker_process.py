"""An extraction worker process: it answers extraction requests from its parent (`workers`), one at a time, over
its stdin/stdout pipes, and exits as soon as the parent is gone.

Frames, both ways: two big-endian 32-bit lengths, a JSON header of that first length, then that
many body bytes. A request's header holds `media_type`, `charset` and `url` and its body is the
fetched page; a reply's header holds `content_hash` and `metadata` (or `error`) and its body is
the extracted text in UTF-8. A request whose header is `{"park": true}` marks a worker kept
(no reply); `{"park": false}` takes it back, and its reply `{"parked": false}` says it will not
exit for a waiting crawl any more. JSON, not pickle: a worker parses untrusted HTML, so what it sends
back is read as data only.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import struct
import sys
import threading
from typing import Any, BinaryIO

from pipelines_dagster.core.crawl.extract.extracted import DocumentError
from pipelines_dagster.core.crawl.extract.slots import wanted

LENGTHS = struct.Struct(">II")
# How often a worker checks that its parent is still there, and a kept one whether a crawl waits for its
# slot. A parent's death closes the request pipe, which wakes the worker at once, unless a process the
# parent forked still holds it open.
_PARENT_CHECK_SECONDS = 0.1
# The address space a worker may map. An idle worker maps ~165 MiB, one that extracted an 8 MB HTML page ~255 MiB
# at its peak (measured 2026-12-06); a 50 MiB document adds its copies and pypdf's streams (each inflated to 75 MB
# at most by pypdf's own limit). A hostile file that needs more gets a MemoryError (its URL fails, saying so), or
# at worst kills its worker, which is replaced: not the machine's memory, shared by every worker and run.
ADDRESS_SPACE_BYTES = 2 * 1024**3


def frame(header: dict[str, Any], body: bytes) -> bytes:
    encoded = json.dumps(header).encode("utf-8")
    return LENGTHS.pack(len(encoded), len(body)) + encoded + body


def _readframe(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """The next frame on a blocking stream; None when the parent closed it."""
    lengths = stream.read(LENGTHS.size)
    if len(lengths) < LENGTHS.size:
        return None
    header_size, body_size = LENGTHS.unpack(lengths)
    header = stream.read(header_size)
    body = stream.read(body_size)
    if len(header) < header_size or len(body) < body_size:
        return None
    return json.loads(header), body


class _Parking:
    """Whether this worker is kept idle between crawls, and the demand file (a descriptor) it then watches."""

    def __init__(self, demand: int | None) -> None:
        self.demand = demand
        self.parked = False
        self.lock = threading.Lock()

    def handle(self, park: bool, replies: BinaryIO) -> None:
        with self.lock:
            self.parked = park
        if not park:  # after this reply, no waiting crawl makes it exit
            replies.write(frame({"parked": False}, b""))
            replies.flush()

    def give_way(self) -> None:
        """Exit, freeing the slot, when kept and a crawl waits for a slot."""
        if self.demand is None:
            return
        with self.lock:
            if self.parked and wanted(self.demand):
                sys.stderr.flush()
                os._exit(0)


def serve(requests: BinaryIO, replies: BinaryIO, parking: _Parking) -> None:
    """Answer extraction requests until the request stream ends."""
    # Here, not at the top: the crawling process imports this module too, and trafilatura is for
    # the workers alone. A worker still loads it as it starts, before it reads a request.
    from pipelines_dagster.core.crawl.extract.page import extract_page

    while (request := _readframe(requests)) is not None:
        header, body = request
        if "park" in header:
            parking.handle(bool(header["park"]), replies)
            continue
        try:
            extracted = extract_page(
                body,
                media_type=header["media_type"],
                charset=header["charset"],
                url=header["url"],
                links=header.get("links", False),
            )
        except DocumentError as exc:  # a document that cannot be read says why, in words
            reply = frame({"error": str(exc)}, b"")
        except Exception as exc:  # reported for this page; the worker serves the next one
            reply = frame({"error": f"text extraction failed: {exc!r}"}, b"")
        else:
            found = {"links": extracted.links, "canonical": extracted.canonical} if header.get("links") else {}
            reply = frame(
                {"content_hash": extracted.content_hash, "metadata": extracted.metadata, **found},
                extracted.content.encode("utf-8"),
            )
        replies.write(reply)
        replies.flush()


def _exit_when_orphaned(requests: int, parking: _Parking) -> None:
    """Exit once the parent has closed the request pipe or died, even in the middle of a page; or, kept, when
    a crawl waits for a slot.

    The main thread only sees the pipe close between pages, and a page can take a minute; a
    parent killed meanwhile is not there to stop the worker.
    """
    parent = os.getppid()
    # Events 0: poll reports only a hang-up (every writer of the pipe is gone) or an error. That
    # also catches a parent that died before this thread started, when getppid() is already another.
    poller = select.poll()
    poller.register(requests, 0)
    while os.getppid() == parent and not poller.poll(_PARENT_CHECK_SECONDS * 1000):
        parking.give_way()
    sys.stderr.flush()
    os._exit(0)


def limit_address_space(limit: int = ADDRESS_SPACE_BYTES) -> None:
    """Cap this process's address space at `limit` (or the hard limit already set, if lower)."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def main(demand: int = -1) -> None:
    # The parent stops a worker by closing its stdin; an interrupt of the whole process group
    # (Ctrl-C on a run) is the parent's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_address_space()
    parking = _Parking(demand if demand >= 0 else None)
    watch = threading.Thread(
        target=_exit_when_orphaned, args=(sys.stdin.fileno(), parking), name="parent-watch", daemon=True
    )
    watch.start()
    # The reply pipe is the original stdout, kept for the protocol alone: whatever a library
    # prints goes to stderr instead of corrupting a frame.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies, parking)
    # Every reply is flushed and nothing else is kept: skip the interpreter's slow teardown of
    # the extraction libraries, so the parent's run does not wait on it.
    sys.stderr.flush()
    os._exit(0)
