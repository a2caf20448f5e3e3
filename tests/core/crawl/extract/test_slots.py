"""Extraction slots: flock'd files that cap the extraction workers of every crawl on a machine, held by the
worker processes themselves, so a process that dies gives its slot back."""

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

from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots, SlotsUnavailable
from pipelines_dagster.core.crawl.extract.workers import ExtractionError, ExtractionWorkers
from tests.core.crawl.extract.test_workers import PAGE, assert_exited, extract
from tests.support.web import Reply, WebServer, html_document

# Takes a slot of the directory and count in argv, prints whether it got one, then sleeps until killed.
HOLDER = """
import sys, time
from pathlib import Path
from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots
print(ExtractionSlots(Path(sys.argv[1]), int(sys.argv[2])).try_take() is not None, flush=True)
time.sleep(600)
"""


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts (slot holders, crawling processes), killed at its end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def hold(holders: list[subprocess.Popen[str]], slots: ExtractionSlots) -> bool:
    """Whether another process got a slot of `slots`; it keeps it until it is killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(slots.directory), str(slots.count)], stdout=subprocess.PIPE, text=True
    )
    holders.append(process)
    assert process.stdout is not None
    return process.stdout.readline().strip() == "True"


def test_each_slot_is_held_by_one_process_at_a_time_and_freed_when_it_dies(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    slots = ExtractionSlots(tmp_path / "slots", 2)
    mine = slots.try_take()
    assert mine is not None
    assert hold(holders, slots) is True
    assert hold(holders, slots) is False  # both taken: one here, one by the first holder
    assert slots.try_take() is None
    os.close(mine)
    assert hold(holders, slots) is True
    # The first holder killed: the OS lets its slot go.
    holders[0].kill()
    holders[0].wait()
    again = slots.try_take()
    assert again is not None
    os.close(again)


def test_an_unusable_directory_is_refused_saying_which_and_why(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SlotsUnavailable, match=r"slot directory .*a-file/slots cannot be used \(Not a directory\)"):
        ExtractionSlots(tmp_path / "a-file" / "slots", 1).try_take()
    with pytest.raises(ValueError, match="at least 1"):
        ExtractionSlots(tmp_path, 0)
    # As every page of a crawl reports it.
    with pytest.raises(ExtractionError, match="could not start: the extraction slot directory"):
        ExtractionWorkers(1, timeout=60, slots=ExtractionSlots(tmp_path / "a-file" / "slots", 1))


def test_the_first_worker_waits_for_a_slot_and_later_ones_start_only_into_a_free_one(tmp_path: Path) -> None:
    slots = ExtractionSlots(tmp_path / "slots", 1)
    first = ExtractionWorkers(2, timeout=60, slots=slots)
    second = ExtractionWorkers(2, timeout=60, slots=slots)
    try:
        [holder] = first.pids
        assert second.pids == []  # the only slot is taken: nothing started
        done = threading.Event()
        waiting = threading.Thread(target=lambda: (extract(second, PAGE), done.set()))
        waiting.start()
        assert not done.wait(0.5)  # the page waits for a slot
        assert second.pids == []
        # Two pages at once in `first` start no second worker there: no slot is free.
        pages = [threading.Thread(target=extract, args=(first, PAGE)) for _ in range(4)]
        for thread in pages:
            thread.start()
        for thread in pages:
            thread.join(timeout=60)
        assert first.pids == [holder]
        # The slot is the worker's, not its parent's: the worker killed frees it for the waiting crawl.
        os.kill(holder, signal.SIGKILL)
        assert done.wait(30), "the waiting crawl never got the freed slot"
        waiting.join(timeout=5)
        assert len(second.pids) == 1
        assert_exited(holder)
    finally:
        second.close()
        first.close()
    # Closed, its worker gone, its slot is free again.
    fd = slots.try_take()
    assert fd is not None
    os.close(fd)


# One crawl of the URLs in argv[3:] with up to 3 extraction workers in the slots of argv[1] (a directory) and
# argv[2] (a count); prints how many pages succeeded.
CRAWL = """
import sys
from pathlib import Path
from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots
from pipelines_dagster.core.crawl.types import CrawlerConfig
from pipelines_dagster.core.security.network_policy import NetworkPolicy

config = CrawlerConfig(network=NetworkPolicy(allowed_networks=("127.0.0.1/32",)), extract_workers=3, obey_robots=False)
with Crawler(config, slots=ExtractionSlots(Path(sys.argv[1]), int(sys.argv[2]))) as crawler:
    print(sum(outcome.status == "success" for outcome in crawler.crawl_all(sys.argv[3:])), flush=True)
"""
PAGES_PER_CRAWL = 8
# A few tenths of a second of extraction each: pages pile up behind a busy worker, and each crawl wants
# every worker it may have.
SLOW_PAGE = html_document("Slow", "\n\n".join(f"Paragraph {n} of a page that takes a while." for n in range(1500)))


def extraction_workers(parents: list[psutil.Process]) -> int:
    count = 0
    for parent in parents:
        try:
            children = parent.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                count += "extract.worker_process" in " ".join(child.cmdline())
            except psutil.Error:
                continue
    return count


@pytest.mark.parametrize("cap", [1, 2])
def test_two_crawls_at_once_never_hold_more_extraction_workers_than_the_slots(tmp_path: Path, cap: int) -> None:
    with WebServer() as server:
        urls = {name: [server.url(f"/{name}/{n}") for n in range(PAGES_PER_CRAWL)] for name in ("a", "b")}
        for url in (*urls["a"], *urls["b"]):
            server.route(url.removeprefix(server.base_url), Reply(body=SLOW_PAGE))
        crawls = [
            subprocess.Popen(
                [sys.executable, "-c", CRAWL, str(tmp_path / "slots"), str(cap), *urls[name]],
                stdout=subprocess.PIPE,
                text=True,
            )
            for name in ("a", "b")
        ]
        parents = [psutil.Process(crawl.pid) for crawl in crawls]
        most = 0
        while any(crawl.poll() is None for crawl in crawls):
            most = max(most, extraction_workers(parents))
            time.sleep(0.01)
        succeeded = [int(crawl.communicate()[0]) for crawl in crawls]
    assert [crawl.returncode for crawl in crawls] == [0, 0]
    assert succeeded == [PAGES_PER_CRAWL, PAGES_PER_CRAWL]
    # Alone, each crawl would have started 3 workers.
    assert most == cap


# A process that runs crawl after crawl, as a Celery pool process does: for each line on stdin, one crawl of a
# page in the slots of argv[1] and argv[2], printing the pid of the worker that extracted it.
CRAWLS = """
import sys
from pathlib import Path
from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots
from pipelines_dagster.core.crawl.extract.workers import ExtractionWorkers, keep_a_worker_between_crawls
from tests.core.crawl.extract.test_workers import PAGE, extract

keep_a_worker_between_crawls()
slots = ExtractionSlots(Path(sys.argv[1]), int(sys.argv[2]))
for _ in sys.stdin:
    workers = ExtractionWorkers(1, timeout=60, slots=slots)
    extract(workers, PAGE)
    [pid] = workers.pids
    workers.close()
    print(pid, flush=True)
"""


def crawl_process(started: list[subprocess.Popen[str]], slots: ExtractionSlots) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", CRAWLS, str(slots.directory), str(slots.count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[4],
    )
    started.append(process)
    return process


def crawl_in(process: subprocess.Popen[str]) -> int:
    """The pid of the worker that extracted the process's next crawl."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("crawl\n")
    process.stdin.flush()
    return int(process.stdout.readline())


def test_a_process_keeps_one_worker_from_crawl_to_crawl_with_its_slot(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    slots = ExtractionSlots(tmp_path / "slots", 2)
    first, second = crawl_process(holders, slots), crawl_process(holders, slots)
    kept = [crawl_in(first), crawl_in(second)]
    time.sleep(0.5)  # two kept workers, each looking for demand, do not mistake each other for it
    assert [crawl_in(first), crawl_in(second)] == kept
    assert all(psutil.Process(pid).is_running() for pid in kept)
    assert slots.try_take() is None  # both slots held by the kept, idle workers
    # Gone with the process that kept it.
    first.kill()
    assert_exited(kept[0])


def test_a_kept_worker_gives_its_slot_to_a_crawl_that_waits_for_one(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    slots = ExtractionSlots(tmp_path / "slots", 1)
    keeper = crawl_process(holders, slots)
    kept = crawl_in(keeper)
    assert slots.try_take() is None
    waiting = ExtractionWorkers(1, timeout=60, slots=slots)
    try:
        assert waiting.pids == []
        done = threading.Event()
        waiter = threading.Thread(target=lambda: (extract(waiting, PAGE), done.set()), daemon=True)
        waiter.start()
        assert done.wait(30), "the kept worker never gave its slot to the waiting crawl"
        assert_exited(kept)
        [mine] = waiting.pids
    finally:
        waiting.close()
    # Its process's next crawl starts a worker of its own, in the slot freed as this crawl closed.
    assert crawl_in(keeper) not in (kept, mine)
