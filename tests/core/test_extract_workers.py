"""The extraction worker processes: same results as in-process extraction, and a worker that dies or
overruns fails only its own page and is replaced."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines_dagster.core.extract import extract_page
from pipelines_dagster.core.extract_workers import ExtractionError, ExtractionWorkers
from pipelines_dagster.core.extracted import Extracted
from tests.support.web import html_document

ARTICLE = (
    "Extraction runs in worker processes of its own, so a page that takes too long or kills its "
    "worker costs that page only, and the crawl goes on with the next one."
)
PAGE = html_document("Workers", f"{ARTICLE}\n\n{ARTICLE}").encode()
# Seconds of extraction: long enough to be caught in the middle of it.
HUGE_PAGE = html_document("Huge", "\n\n".join(f"{ARTICLE} Part {n}." for n in range(20000))).encode()


@pytest.fixture
def workers() -> Iterator[ExtractionWorkers]:
    started = ExtractionWorkers(1, timeout=60)
    yield started
    started.close()


def extract(workers: ExtractionWorkers, body: bytes, media_type: str = "text/html") -> Extracted:
    return workers.extract(body, media_type=media_type, charset="utf-8", url="https://docs.example.com/workers")


def test_a_worker_extracts_exactly_what_the_crawler_would_in_process(workers: ExtractionWorkers) -> None:
    for body, media_type in ((PAGE, "text/html"), ("plain text, kept as it is\n".encode(), "text/plain")):
        in_process = extract_page(body, media_type=media_type, charset="utf-8", url="https://docs.example.com/workers")
        assert extract(workers, body, media_type) == in_process
    assert extract(workers, PAGE).content_hash is not None


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


def assert_exited(pid: int) -> None:
    """The process is gone (reaped, or a zombie about to be)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(") ", 1)[1].startswith("Z"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.02)
    raise AssertionError(f"worker {pid} is still running")
