"""The extraction worker processes: same results as in-process extraction, and a worker that dies or
overruns fails only its own page and is replaced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pipelines_dagster.core.crawl.extract.extracted import Extracted
from pipelines_dagster.core.crawl.extract.page import extract_page
from pipelines_dagster.core.crawl.extract.workers import ExtractionError, ExtractionWorkers
from tests.support.web import html_document

ARTICLE = (
    "Extraction runs in worker processes of its own, so a page that takes too long or kills its "
    "worker costs that page only, and the crawl goes on with the next one."
)
PAGE = html_document("Workers", f"{ARTICLE}\n\n{ARTICLE}").encode()
# Seconds of extraction: long enough to be caught in the middle of it.
HUGE_PAGE = html_document("Huge", "\n\n".join(f"{ARTICLE} Part {n}." for n in range(20000))).encode()
# Minutes of extraction (many tiny paragraphs): a worker on it is busy long after a test gives up.
ENDLESS_PAGE = html_document("Endless", "\n\n".join(f"w{n} x" for n in range(300000))).encode()


@pytest.fixture
def workers() -> Iterator[ExtractionWorkers]:
    started = ExtractionWorkers(1, timeout=60)
    yield started
    started.close()


def extract(workers: ExtractionWorkers, body: bytes, media_type: str = "text/html") -> Extracted:
    return workers.extract(body, media_type=media_type, charset="utf-8", url="https://docs.example.com/workers")


def test_a_worker_extracts_exactly_what_the_crawler_would_in_process(workers: ExtractionWorkers) -> None:
    for body, media_type in ((PAGE, "text/html"), (b"plain text, kept as it is\n", "text/plain")):
        in_process = extract_page(body, media_type=media_type, charset="utf-8", url="https://docs.example.com/workers")
        assert extract(workers, body, media_type) == in_process
    assert extract(workers, PAGE).content_hash is not None


LINKED_PAGE = (
    b'<html><head><link rel="canonical" href="/guide"><title>Guide</title></head><body>'
    b'<main><p>Read the <a href="install#top">install notes</a>, the <a href="/faq?b=2&amp;a=1">FAQ</a>'
    b' and <a href="mailto:team@example.com">write</a>.</p><p>Enough text to keep as content.</p></main>'
    b"</body></html>"
)


def test_links_come_from_the_same_extraction_only_when_asked(workers: ExtractionWorkers) -> None:
    url = "https://docs.example.com/docs/guide.html"
    asked = workers.extract(LINKED_PAGE, media_type="text/html", charset="utf-8", url=url, links=True)
    assert asked.links == ("https://docs.example.com/docs/install", "https://docs.example.com/faq?b=2&a=1")
    assert asked.canonical == "https://docs.example.com/guide"
    assert asked == extract_page(LINKED_PAGE, media_type="text/html", charset="utf-8", url=url, links=True)
    unasked = workers.extract(LINKED_PAGE, media_type="text/html", charset="utf-8", url=url)
    assert (unasked.links, unasked.canonical) == ((), None)
    assert (unasked.content, unasked.content_hash) == (asked.content, asked.content_hash)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads a process's environment from /proc (Linux)")
def test_a_worker_inherits_no_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINES_DATABASE_URL", "postgresql://app:hunter2@db/app")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    workers = ExtractionWorkers(1, timeout=60)
    try:
        assert extract(workers, PAGE).content_hash is not None
        [pid] = workers.pids
        with open(f"/proc/{pid}/environ", "rb") as environ:
            names = {entry.split(b"=", 1)[0].decode() for entry in environ.read().split(b"\0") if entry}
    finally:
        workers.close()
    assert "PIPELINES_DATABASE_URL" not in names and "AWS_SECRET_ACCESS_KEY" not in names
    assert {"PATH", "LC_ALL"} <= names


def test_an_overrunning_page_is_stopped_and_its_worker_replaced(workers: ExtractionWorkers) -> None:
    extract(workers, PAGE)  # the worker is up
    [before] = workers.pids
    workers.timeout = 0.2
    with pytest.raises(ExtractionError, match=r"text extraction took longer than 0.2 s; its worker was stopped"):
        extract(workers, HUGE_PAGE)
    assert_exited(before)
    workers.timeout = 60
    assert extract(workers, PAGE).content_hash is not None
    assert workers.pids != [before]


def test_a_worker_killed_mid_page_fails_that_page_only(workers: ExtractionWorkers) -> None:
    extract(workers, PAGE)
    [pid] = workers.pids
    failures: list[Exception] = []

    def run() -> None:
        try:
            extract(workers, HUGE_PAGE)
        except ExtractionError as exc:
            failures.append(exc)

    busy = threading.Thread(target=run)
    busy.start()
    time.sleep(0.3)  # the worker is now inside the huge page
    os.kill(pid, signal.SIGKILL)
    busy.join(timeout=30)
    assert [str(failure) for failure in failures] == [
        "the text extraction worker died while extracting this page (exit code -9)"
    ]
    assert extract(workers, PAGE).content_hash is not None
    assert workers.pids != [pid]


def test_a_worker_that_died_while_idle_is_replaced_before_the_next_page(workers: ExtractionWorkers) -> None:
    extract(workers, PAGE)
    [pid] = workers.pids
    os.kill(pid, signal.SIGKILL)
    assert_exited(pid)
    assert extract(workers, PAGE).content_hash is not None


def test_a_second_worker_starts_only_when_a_page_finds_the_first_busy() -> None:
    workers = ExtractionWorkers(2, timeout=60)
    try:
        [first] = workers.pids
        for _ in range(3):  # one page at a time never needs a second worker
            extract(workers, PAGE)
        assert workers.pids == [first]
        busy = threading.Thread(target=extract, args=(workers, HUGE_PAGE))
        busy.start()
        time.sleep(0.3)  # the first worker is now inside the huge page
        assert extract(workers, PAGE).content_hash is not None
        assert len(workers.pids) == 2 and first in workers.pids
        # Both busy at once again: the third page waits for one of them instead of starting a third.
        pages = [threading.Thread(target=extract, args=(workers, HUGE_PAGE)) for _ in range(3)]
        for thread in pages:
            thread.start()
        time.sleep(0.3)
        assert len(workers.pids) == 2
        for thread in [busy, *pages]:
            thread.join(timeout=120)
    finally:
        workers.close()


def test_close_stops_every_worker_and_later_pages_are_refused() -> None:
    workers = ExtractionWorkers(2, timeout=60)
    busy = threading.Thread(target=extract, args=(workers, HUGE_PAGE))
    busy.start()
    time.sleep(0.3)
    extract(workers, PAGE)  # the first worker is busy: a second starts
    busy.join(timeout=60)
    pids = workers.pids
    assert len(pids) == 2
    workers.close()
    for pid in pids:
        assert_exited(pid)
    with pytest.raises(ExtractionError, match="the text extraction workers were stopped"):
        extract(workers, PAGE)


# Starts a worker and extracts the page it reads from stdin; prints the worker's pid first, and that
# of a forked child that keeps the worker's request pipe open after this process dies (0 for none).
WORKERS_PARENT = """
import os, sys, time
from pipelines_dagster.core.crawl.extract.workers import ExtractionWorkers
workers = ExtractionWorkers(1, timeout=600)
holder = os.fork() if sys.argv[1:] == ["fork"] else None
if holder == 0:
    time.sleep(60)
    os._exit(0)
print(*workers.pids, holder or 0, flush=True)
workers.extract(sys.stdin.buffer.read(), media_type="text/html", charset="utf-8", url="https://docs.example.com/endless")
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's state from /proc (Linux)")
@pytest.mark.parametrize("holder", [None, "fork"], ids=["pipe-closes", "pipe-held-open-by-a-forked-child"])
def test_a_worker_exits_within_two_seconds_of_its_parent_being_killed_mid_page(holder: str | None) -> None:
    command = [sys.executable, "-c", WORKERS_PARENT, *([holder] if holder else [])]
    parent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    started: list[psutil.Process] = []
    try:
        assert parent.stdin is not None and parent.stdout is not None
        started = [psutil.Process(int(pid)) for pid in parent.stdout.readline().split() if pid != b"0"]
        worker = started[0]
        parent.stdin.write(ENDLESS_PAGE)
        parent.stdin.close()

        def cpu_seconds() -> float:
            times = worker.cpu_times()
            return times.user + times.system

        # Start-up costs a few tenths of a CPU-second; past a whole one the worker is inside the page.
        deadline = time.monotonic() + 30
        while cpu_seconds() < 1.0:
            assert time.monotonic() < deadline, "the worker never got going on the page"
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        assert_exited(worker.pid, timeout=2)
    finally:
        parent.kill()
        parent.wait()
        for process in started:
            if process.is_running():
                process.kill()  # psutil checks it is still the same process, not a reused pid


def assert_exited(pid: int, *, timeout: float = 10) -> None:
    """The process is gone (reaped, or a zombie about to be)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running_threads(pid):
            return
        time.sleep(0.02)
    raise AssertionError(f"worker {pid} is still running")


def running_threads(pid: int) -> int:
    """Threads of the process not yet ended. Not the main thread's state alone: a killed worker's
    main thread is a zombie a moment before its watch thread ends, and only then can it be reaped."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    running = 0
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/stat") as stat:
                running += not stat.read().split(") ", 1)[1].startswith(("Z", "X"))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return running
