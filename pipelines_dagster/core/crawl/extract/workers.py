"""Text extraction in worker processes of our own.

Each worker is a plain Python process that imports only the extraction code and answers one
request at a time over its stdin/stdout pipes. Unlike a multiprocessing pool it never imports the
parent's main module (the `dagster` CLI, a script), so it is ready in about 0.2 s where a
forkserver pool under the CLI took a second, and a worker stuck on one page can be killed and
replaced without breaking the others. A worker exits as soon as its parent is gone, even in the
middle of a page, so none outlives a run process that was killed.

A process that runs crawl after crawl (a Celery pool process) keeps one idle worker between them
(`keep_a_worker_between_crawls`), so a run does not pay a worker's start, about a quarter of a
CPU-second and most of a one-page run's cost. The kept worker keeps its extraction slot while it
waits, and exits, freeing the slot, as soon as a crawl anywhere on the machine waits for one.

The worker process's side, and the frames both sides exchange, are in `worker_process`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from queue import Empty, SimpleQueue
from typing import Any

from pipelines_dagster.core.crawl.extract import worker_process
from pipelines_dagster.core.crawl.extract.extracted import Extracted
from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots, SlotsUnavailable
from pipelines_dagster.core.crawl.extract.worker_process import LENGTHS, frame

# A worker imports from the parent's sys.path, as multiprocessing's spawn does, so it runs the
# same code as the parent whether the package is installed or run from a checkout.
# Its second argument is the descriptor of the slots' demand file it was given, or -1.
_BOOT = "import json, sys; sys.path[:] = json.loads(sys.argv[1]); from {module} import main; main(int(sys.argv[2]))"
_STOP_GRACE_SECONDS = 5.0
# How long a kept worker has to say it is back for a new crawl, and to take the note that it is kept.
_PARK_SECONDS = 2.0
# How often a crawl with no worker yet looks for a freed slot: a few files checked a few times a second
# cost nothing next to a crawl, and a freed slot is found well before the next page would be.
_SLOT_WAIT_SECONDS = 0.05
# A worker parses untrusted pages, so it gets no secrets: of the parent's environment it keeps
# only what locates programs and files, the locale, and Python's own settings.
_KEPT_VARIABLES = frozenset({"PATH", "HOME", "TMPDIR", "TEMP", "TMP", "TZ", "LANG", "LANGUAGE", "SYSTEMROOT"})


def worker_environment(environment: dict[str, str]) -> dict[str, str]:
    """What of `environment` a worker process inherits."""
    return {
        name: value
        for name, value in environment.items()
        if name in _KEPT_VARIABLES or name.startswith(("LC_", "PYTHON"))
    }


class ExtractionError(Exception):
    """One page's extraction did not finish; the message is the reason, for the URL's outcome."""


class _Worker:
    """One worker process and its pipes, used by one thread at a time; it holds `slot` (a locked file
    descriptor, see `slots`) while it lives, and this process no longer does. `slots` says whose slot."""

    def __init__(self, slot: int | None = None, slots: ExtractionSlots | None = None) -> None:
        self.slots = slots
        given = [] if slot is None else [slot]
        try:
            if slot is not None and slots is not None:
                given.append(slots.open_demand())
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOT.format(module=worker_process.__name__),
                    json.dumps([str(entry) for entry in sys.path]),
                    str(given[1] if len(given) > 1 else -1),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=worker_environment(dict(os.environ)),
                close_fds=True,
                pass_fds=given,
            )
        finally:
            for fd in given:
                os.close(fd)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._requests = self.process.stdin.fileno()
        self._replies = self.process.stdout.fileno()
        os.set_blocking(self._requests, False)
        os.set_blocking(self._replies, False)

    def extract(
        self, body: bytes, *, media_type: str, charset: str | None, url: str, timeout: float, links: bool = False
    ) -> Extracted:
        """Raises ExtractionError; after a timeout or a broken pipe the worker is stopped (not alive)."""
        deadline = time.monotonic() + timeout
        request = {"media_type": media_type, "charset": charset, "url": url, "links": links}
        try:
            self._send(frame(request, body), deadline)
            header, reply = self._reply(deadline)
            content = reply.decode("utf-8")
            if "error" in header:
                raise ExtractionError(str(header["error"]))
            return Extracted(
                content=content,
                content_hash=header["content_hash"],
                metadata=header["metadata"],
                links=tuple(header.get("links", ())),
                canonical=header.get("canonical"),
            )
        except ExtractionError:
            raise  # the worker read the whole request, answered it, and serves the next
        except TimeoutError:
            self.stop()
            raise ExtractionError(f"text extraction took longer than {timeout:g} s; its worker was stopped") from None
        except (BrokenPipeError, EOFError):
            self.stop(grace=1.0)  # it is exiting already: let it, to report how it ended
            raise ExtractionError(
                f"the text extraction worker died while extracting this page (exit code {self.process.returncode})"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:  # JSON, UTF-8 or a missing field
            self.stop()
            raise ExtractionError(f"the text extraction worker sent an unreadable reply ({exc!r})") from None
        except BaseException:
            self.stop()  # a reply half read: the pipe is out of step, so the worker cannot be reused
            raise

    def _reply(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        header_size, body_size = LENGTHS.unpack(self._receive(LENGTHS.size, deadline))
        header = json.loads(self._receive(header_size, deadline))
        return header, self._receive(body_size, deadline)

    def park(self) -> bool:
        """Mark it kept, to exit when a crawl waits for its slot; False (and stopped) when it cannot be told."""
        try:
            self._send(frame({"park": True}, b""), time.monotonic() + _PARK_SECONDS)
        except (OSError, TimeoutError):
            self.stop()
            return False
        return True

    def resume(self) -> bool:
        """Take a kept worker back for a crawl; False (and stopped) when it has exited meanwhile."""
        try:
            self._send(frame({"park": False}, b""), time.monotonic() + _PARK_SECONDS)
            header, _ = self._reply(time.monotonic() + _PARK_SECONDS)
        except (OSError, EOFError, TimeoutError, ValueError):
            header = None
        if header != {"parked": False}:
            self.stop()
            return False
        return True

    @property
    def descriptors(self) -> frozenset[int]:
        """This process's ends of its pipes."""
        return frozenset(
            pipe.fileno() for pipe in (self.process.stdin, self.process.stdout) if pipe and not pipe.closed
        )

    def _send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self._requests, select.POLLOUT, deadline)
            try:
                view = view[os.write(self._requests, view) :]
            except BlockingIOError:
                continue

    def _receive(self, size: int, deadline: float) -> bytes:
        received = bytearray()
        while len(received) < size:
            self._wait(self._replies, select.POLLIN, deadline)
            try:
                chunk = os.read(self._replies, size - len(received))
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError
            received += chunk
        return bytes(received)

    @staticmethod
    def _wait(fd: int, event: int, deadline: float) -> None:
        poller = select.poll()
        poller.register(fd, event)
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            raise TimeoutError

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float = 0.0) -> None:
        """Close the pipes (a worker exits at the end of its requests); kill it if it is still there after `grace`."""
        self.close_pipes()
        self.reap(time.monotonic() + grace)

    def close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()

    def reap(self, deadline: float) -> None:
        try:
            self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# The worker this process keeps between crawls, once `keep_a_worker_between_crawls` has been called.
_keeping = False
_kept: _Worker | None = None
_kept_lock = threading.Lock()


def keep_a_worker_between_crawls() -> None:
    """From now on, a crawl that ends keeps one idle worker (with its slot) for this process's next crawl.

    For a process that runs crawl after crawl, like a Celery pool process: elsewhere a kept worker is a
    process that waits for nothing. A kept worker exits as soon as its parent does, or a crawl waits for a slot.
    """
    global _keeping
    _keeping = True


def kept_descriptors() -> frozenset[int]:
    """This process's descriptors that belong to its kept worker: they stay open between crawls on purpose."""
    with _kept_lock:
        return frozenset() if _kept is None else _kept.descriptors


def _resume_kept(slots: ExtractionSlots | None) -> _Worker | None:
    """The kept worker, back at work, if there is one of these slots still alive."""
    global _kept
    with _kept_lock:
        worker, _kept = _kept, None
    if worker is None:
        return None
    if worker.slots != slots:
        worker.stop()
        return None
    return worker if worker.alive and worker.resume() else None


def _keep(workers: list[_Worker]) -> _Worker | None:
    """Keep one live worker of `workers` (all idle) unless one is kept already; the one kept."""
    global _kept
    with _kept_lock:
        if not _keeping or _kept is not None:
            return None
        for worker in workers:
            if worker.alive and worker.park():
                _kept = worker
                return worker
    return None


class ExtractionWorkers:
    """Up to `count` extraction worker processes, and a thread per worker to wait on them.

    One worker starts at once (or the one kept from this process's last crawl is taken back); another
    only when a page finds every started worker busy, so a crawl of a page or two pays for one worker's
    start-up (about a quarter of a CPU-second), not one per core.
    A worker that dies or overruns `timeout` on a page fails that page only and is replaced.

    With `slots`, each worker also needs a free slot of the machine's to start: the first waits for
    one (a crawl needs a worker), the others start only when one is free as a page finds every
    worker busy.
    """

    def __init__(self, count: int, *, timeout: float, slots: ExtractionSlots | None = None) -> None:
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        self.count = count
        self.timeout = timeout
        self.slots = slots
        self._lock = threading.Lock()
        self._closed = False
        self._idle: SimpleQueue[_Worker] = SimpleQueue()
        self._workers: list[_Worker] = []
        self._threads = ThreadPoolExecutor(max_workers=count, thread_name_prefix="extract")
        with self._lock:
            if (worker := _resume_kept(slots)) is not None:
                self._workers.append(worker)
            else:
                worker = self._spawn()
            if worker is not None:
                self._idle.put(worker)

    def _take(self) -> _Worker:
        """An idle worker; a new one when all are busy and there is room and a slot for one, else the
        next freed; with no worker at all, whichever comes first of a freed slot and a worker, meanwhile saying
        that a slot is wanted (a worker kept elsewhere gives its own up)."""
        with contextlib.ExitStack() as waiting:
            say_wanted: Callable[[], None] | None = None
            while True:
                try:
                    return self._idle.get_nowait()
                except Empty:
                    pass
                with self._lock:
                    if len(self._workers) < self.count and (worker := self._spawn()) is not None:
                        return worker
                    started = bool(self._workers)
                if started:
                    return self._idle.get()
                if say_wanted is None and self.slots is not None:
                    try:
                        say_wanted = waiting.enter_context(self.slots.wanting())
                    except SlotsUnavailable as exc:
                        raise ExtractionError(f"the text extraction workers could not start: {exc}") from None
                elif say_wanted is not None:
                    say_wanted()
                try:
                    return self._idle.get(timeout=_SLOT_WAIT_SECONDS)
                except Empty:
                    continue

    def _spawn(self) -> _Worker | None:
        """Start a worker, or None when no slot is free; the caller holds the lock."""
        if self._closed:
            raise ExtractionError("the text extraction workers were stopped")
        try:
            slot = None if self.slots is None else self.slots.try_take()
        except SlotsUnavailable as exc:
            raise ExtractionError(f"the text extraction workers could not start: {exc}") from None
        if self.slots is not None and slot is None:
            return None
        try:
            worker = _Worker(slot, self.slots)
        except (OSError, SlotsUnavailable) as exc:
            raise ExtractionError(f"the text extraction workers could not start: {exc}") from None
        self._workers.append(worker)
        return worker

    def _discard(self, dead: _Worker) -> None:
        with self._lock:
            if dead in self._workers:
                self._workers.remove(dead)

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [worker.process.pid for worker in self._workers if worker.alive]

    def extract(self, body: bytes, *, media_type: str, charset: str | None, url: str, links: bool = False) -> Extracted:
        """Extract one page in the next idle worker, blocking until one is free; `links`: its links too."""
        worker = self._take()
        while not worker.alive:  # stopped after its last page, or died since: its slot went with it
            self._discard(worker)
            worker = self._take()
        try:
            return worker.extract(
                body, media_type=media_type, charset=charset, url=url, timeout=self.timeout, links=links
            )
        finally:
            self._idle.put(worker)

    async def extract_async(
        self, body: bytes, *, media_type: str, charset: str | None, url: str, links: bool = False
    ) -> Extracted:
        """`extract` off the event loop."""
        job = partial(self.extract, body, media_type=media_type, charset=charset, url=url, links=links)
        return await asyncio.get_running_loop().run_in_executor(self._threads, job)

    def close(self) -> None:
        """Stop every worker but one kept (`keep_a_worker_between_crawls`): each exits when its request pipe
        closes, or is killed after a grace period."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        idle = []
        with contextlib.suppress(Empty):
            while True:
                idle.append(self._idle.get_nowait())
        if (kept := _keep([worker for worker in idle if worker in workers])) is not None:
            workers.remove(kept)
        # All told to stop first, then waited for together.
        for worker in workers:
            worker.close_pipes()
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        for worker in workers:
            worker.reap(deadline)
        self._threads.shutdown(wait=False, cancel_futures=True)
