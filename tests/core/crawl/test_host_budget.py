"""One per-host budget across crawls, on real Redis and the lease table (SQLite, PostgreSQL), counted by a real
web server: two crawls of one host together never exceed its concurrency or its Crawl-delay."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
import redis
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import create_engine
from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.host_budget import HostBudget, slot_lock_name
from pipelines_dagster.core.crawl.types import CrawlerConfig, CrawlOutcome
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.core.storage.locks import DatabaseLocks, Locks, RedisLocks
from tests.support.web import Reply, Request, WebServer, page

CONFIG = CrawlerConfig(
    user_agent="pipelines-dagster-tests/1.0",
    per_host_concurrency=2,
    connect_timeout=2,
    total_timeout=5,
    max_attempts=1,
    network=NetworkPolicy(allowed_networks=("127.0.0.1/32",)),
    extract_workers=1,
)
TEXT = "Every crawl of this host draws on one budget, whichever workspace it runs for.\n\n" * 3


pytestmark = pytest.mark.usefixtures("loopback_only")


@pytest.fixture(params=["redis", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[Callable[[], Locks]]:
    """Makes `Locks` over one shared store, each with its own client or engine, as separate processes have."""
    closers: list[Callable[[], None]] = []
    if request.param == "redis":
        url, prefix = request.getfixturevalue("redis_url"), f"pipelines-test:{uuid.uuid4().hex}:"

        def make() -> Locks:
            client = redis.Redis.from_url(url)
            closers.append(client.close)
            return RedisLocks(client, key_prefix=prefix)

    else:
        shared: sa.Engine = request.getfixturevalue(f"{request.param}_engine")

        def make() -> Locks:
            engine = create_engine(shared.url.render_as_string(hide_password=False))
            closers.append(engine.dispose)
            return DatabaseLocks(engine)

    yield make
    for close in closers:
        close()


def crawl_together(crawlers: list[Crawler], urls: list[list[str]]) -> list[list[CrawlOutcome]]:
    """Each crawler crawls its URLs on its own thread and event loop, all starting at once."""
    start = threading.Barrier(len(crawlers))
    results: list[list[CrawlOutcome]] = [[] for _ in crawlers]

    def run(index: int) -> None:
        start.wait()
        results[index] = crawlers[index].crawl_all(urls[index])

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(crawlers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def two_crawls(web: WebServer, budgets: list[HostBudget | None], *, pages: int) -> list[list[CrawlOutcome]]:
    crawlers = [Crawler(CONFIG, host_budget=budget) for budget in budgets]
    try:
        return crawl_together(crawlers, [[web.url(f"/{run}/{n}") for n in range(pages)] for run in ("a", "b")])
    finally:
        for crawler in crawlers:
            crawler.close()


def statuses(results: list[list[CrawlOutcome]]) -> list[str]:
    return [outcome.status for outcome in itertools.chain(*results)]


def serve_slowly(web: WebServer, *, pages: int) -> None:
    for run in ("a", "b"):
        for n in range(pages):
            web.route(f"/{run}/{n}", page(f"Page {run}{n}", TEXT, delay=0.25))


def page_gaps(web: WebServer) -> list[float]:
    times = sorted(request.received_at for request in web.requests if request.path != "/robots.txt")
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def test_two_crawls_of_one_host_never_exceed_its_concurrency(web: WebServer, backend: Callable[[], Locks]) -> None:
    serve_slowly(web, pages=5)
    results = two_crawls(web, [HostBudget(backend()), HostBudget(backend())], pages=5)
    assert statuses(results) == ["success"] * 10
    assert web.max_in_flight == 2


def test_without_a_shared_budget_two_crawls_double_the_load(web: WebServer) -> None:
    """The control: what the budget prevents, so the test above can tell it apart."""
    serve_slowly(web, pages=5)
    results = two_crawls(web, [None, None], pages=5)
    assert statuses(results) == ["success"] * 10
    assert web.max_in_flight == 4


def test_a_crawl_delay_spaces_the_requests_of_both_crawls(web: WebServer, backend: Callable[[], Locks]) -> None:
    web.route("/robots.txt", Reply(body="User-agent: *\nCrawl-delay: 0.3\n", content_type="text/plain"))
    for run in ("a", "b"):
        for n in range(3):
            web.route(f"/{run}/{n}", page(f"Paced {run}{n}", TEXT))
    results = two_crawls(web, [HostBudget(backend()), HostBudget(backend())], pages=3)
    assert statuses(results) == ["success"] * 6
    gaps = page_gaps(web)
    assert len(gaps) == 5 and min(gaps) >= 0.3, gaps


def test_without_a_shared_budget_two_crawls_each_keep_their_own_delay(web: WebServer) -> None:
    web.route("/robots.txt", Reply(body="User-agent: *\nCrawl-delay: 0.3\n", content_type="text/plain"))
    for run in ("a", "b"):
        for n in range(3):
            web.route(f"/{run}/{n}", page(f"Paced {run}{n}", TEXT))
    results = two_crawls(web, [None, None], pages=3)
    assert statuses(results) == ["success"] * 6
    assert min(page_gaps(web)) < 0.28


def test_a_slot_left_by_a_crashed_crawl_frees_after_its_ttl(web: WebServer, backend: Callable[[], Locks]) -> None:
    web.route("/page", page("After the crash", TEXT))
    host = f"127.0.0.1:{web.port}"
    crashed = backend()
    for index in range(CONFIG.per_host_concurrency):  # a crawl that died holding every slot: never released
        assert crashed.acquire(slot_lock_name(host, index), "crashed", ttl_seconds=1.0)
    began = time.monotonic()
    with Crawler(replace(CONFIG, obey_robots=False), host_budget=HostBudget(backend())) as crawler:
        [outcome] = crawler.crawl_all([web.url("/page")])
    assert outcome.status == "success"
    [request] = web.requests
    assert 0.9 <= request.received_at - began < 3


def test_a_slot_is_renewed_while_held_and_released_after(backend: Callable[[], Locks]) -> None:
    locks, rival = backend(), backend()
    budget = HostBudget(locks, lease_ttl=0.3, hand_over_for=0)
    name = slot_lock_name("example.org", 0)

    async def hold() -> list[bool]:
        async with budget.slot("Example.ORG", concurrency=1):
            await asyncio.sleep(0.8)  # well past the TTL
            held = [locks.is_locked(name), rival.acquire(name, "rival", ttl_seconds=5)]
        return [*held, locks.is_locked(name)]

    assert asyncio.run(hold()) == [True, False, False]


def test_slots_of_two_budgets_bound_their_holders_together(backend: Callable[[], Locks]) -> None:
    budgets = [HostBudget(backend()), HostBudget(backend())]
    holding, most = 0, 0

    async def request(budget: HostBudget) -> None:
        nonlocal holding, most
        async with budget.slot("example.org:8080", concurrency=3):
            holding += 1
            most = max(most, holding)
            await asyncio.sleep(0.05)
            holding -= 1

    async def main() -> None:
        await asyncio.gather(*(request(budgets[n % 2]) for n in range(12)))

    asyncio.run(main())
    assert most == 3


def test_a_turn_keeps_every_crawl_off_the_host_until_the_delay_after_it(backend: Callable[[], Locks]) -> None:
    budgets = [HostBudget(backend()), HostBudget(backend())]
    turns: list[tuple[float, float]] = []

    async def take(budget: HostBudget) -> None:
        async with budget.turn("Example.org", delay=0.2):
            began = time.monotonic()
            await asyncio.sleep(0.05)  # the request
            turns.append((began, time.monotonic()))

    async def main() -> None:
        await asyncio.gather(*(take(budgets[n % 2]) for n in range(4)))

    asyncio.run(main())
    # From the end of one turn to the start of the next; 10 ms for the backends' millisecond clocks.
    # Not released, the turn's lease ends with the delay: the next starts no sooner.
    assert min(later[0] - earlier[1] for earlier, later in itertools.pairwise(turns)) >= 0.19, turns


def test_a_crawl_hands_its_slot_to_its_next_request_for_a_while_then_frees_it(
    web: WebServer, backend: Callable[[], Locks]
) -> None:
    locks = backend()
    host = f"127.0.0.1:{web.port}"
    owners: list[str | None] = []

    def serve(_request: Request) -> Reply:
        owners.append(locks.owner_of(slot_lock_name(host, 0)))
        return page("Handed over", TEXT, delay=0.2)

    for n in range(6):
        web.handle(f"/page/{n}", serve)
    config = replace(CONFIG, per_host_concurrency=1, obey_robots=False)
    with Crawler(config, host_budget=HostBudget(backend(), hand_over_for=0.5)) as crawler:
        outcomes = crawler.crawl_all([web.url(f"/page/{n}") for n in range(6)])
    assert [outcome.status for outcome in outcomes] == ["success"] * 6
    assert None not in owners
    # Handed over without a backend call (the same lease), but taken anew once older than 0.5 s.
    assert any(earlier == later for earlier, later in itertools.pairwise(owners)), owners
    assert 2 <= len(set(owners)) < 6, owners
    assert not locks.is_locked(slot_lock_name(host, 0))


def test_budget_settings_must_be_positive() -> None:
    with pytest.raises(ValueError, match="lease_ttl"):
        HostBudget(DatabaseLocks(sa.create_engine("sqlite://")), lease_ttl=0)


def test_an_unreachable_locks_backend_fails_the_url_with_the_reason_and_sends_nothing(web: WebServer) -> None:
    web.route("/page", page("Never sent", TEXT))
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)  # nothing listens on port 1
    with Crawler(replace(CONFIG, obey_robots=False), host_budget=HostBudget(RedisLocks(unreachable))) as crawler:
        [outcome] = crawler.crawl_all([web.url("/page")])
    assert outcome.status == "failed"
    assert outcome.error is not None and "could not be taken from the locks backend" in outcome.error
    assert web.requests == []
