"""What limits a crawl's rate, as its requests wait for it, against a real loopback web server: a robots.txt
Crawl-delay, per-host concurrency, the host budget shared with another crawl; a quick crawl names nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest
import sqlalchemy as sa

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.host_budget import HostBudget
from pipelines_dagster.core.crawl.throttle import Limit, Limiter, RequestWaits, describe_limits
from pipelines_dagster.core.crawl.types import ListSource
from pipelines_dagster.core.storage.locks import DatabaseLocks
from tests.core.crawl.test_host_budget import CONFIG  # two requests per host at a time
from tests.support.web import Reply, WebServer, page

TEXT = "A page of a site that answers as fast, or as slowly, as the test asks."

pytestmark = pytest.mark.usefixtures("loopback_only")


def crawl(crawler: Crawler, urls: list[str]) -> tuple[list[Limit], float]:
    """Crawl to the end: what limited its rate, and how long it took."""
    waits = RequestWaits()

    async def run() -> list[str]:
        return [outcome.status async for outcome in crawler.crawl_source(ListSource(urls), waits=waits)]

    began = time.monotonic()
    assert set(asyncio.run(run())) == {"success"}
    elapsed = time.monotonic() - began
    return waits.limits(elapsed), elapsed


def pages(web: WebServer, prefix: str, count: int, *, delay: float = 0.0) -> list[str]:
    for n in range(count):
        web.route(f"/{prefix}/{n}", page(f"{prefix} {n}", TEXT, delay=delay))
    return [web.url(f"/{prefix}/{n}") for n in range(count)]


def test_a_robots_crawl_delay_is_named_with_its_origin_and_delay(web: WebServer) -> None:
    web.route("/robots.txt", Reply(body="User-agent: *\nCrawl-delay: 0.4\n", content_type="text/plain"))
    with Crawler(CONFIG) as crawler:
        limits, _ = crawl(crawler, pages(web, "paced", 5))
    first = limits[0]
    assert (first.limiter, first.where, first.setting) == (Limiter.CRAWL_DELAY, web.base_url, "0.4 s between requests")
    # The first request goes at once; the others wait 0.4, 0.8, 1.2 and 1.6 s for their turns.
    assert first.requests == 4 and 3.5 <= first.waited_seconds < 4.5
    assert describe_limits(limits).startswith(f"robots.txt Crawl-delay of {web.base_url} (0.4 s between requests)")


def test_slow_pages_past_per_host_concurrency_name_it(web: WebServer) -> None:
    with Crawler(CONFIG) as crawler:
        limits, _ = crawl(crawler, pages(web, "slow", 6, delay=0.6))
    # Two at a time: the third and fourth wait one answer (0.6 s), the fifth and sixth two.
    assert [(limit.limiter, limit.where, limit.setting, limit.requests) for limit in limits] == [
        (Limiter.HOST_CONCURRENCY, "127.0.0.1", "2 requests at a time", 4)
    ]
    assert 3.0 <= limits[0].waited_seconds < 4.5


def test_a_quick_crawl_names_nothing(web: WebServer) -> None:
    with Crawler(CONFIG) as crawler:
        limits, _ = crawl(crawler, pages(web, "quick", 3))
    assert limits == [] and describe_limits(limits) is None


def test_a_host_budget_shared_with_another_crawl_is_named(web: WebServer, sqlite_engine: sa.Engine) -> None:
    locks = DatabaseLocks(sqlite_engine)
    urls = {run: pages(web, run, 6, delay=0.5) for run in ("a", "b")}
    found: dict[str, list[Limit]] = {}
    start = threading.Barrier(2)

    def run(name: str) -> None:
        # Its own slots allow each crawl 2 requests at a time; the budget, 2 for both together.
        with Crawler(CONFIG, host_budget=HostBudget(locks)) as crawler:
            start.wait()
            found[name], _ = crawl(crawler, urls[name])

    threads = [threading.Thread(target=run, args=(name,)) for name in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    budget = [limit for limits in found.values() for limit in limits if limit.limiter is Limiter.HOST_BUDGET]
    assert budget, found
    assert {limit.where for limit in budget} == {f"127.0.0.1:{web.port}"}
    assert all(limit.setting == "2 requests at a time" for limit in budget)


def test_only_a_limiter_that_held_requests_back_for_a_tenth_of_the_time_is_named() -> None:
    waits = RequestWaits()
    waits.waited(Limiter.HOST_CONCURRENCY, "a.example", 3.0, setting="4 requests at a time")
    waits.waited(Limiter.CRAWL_DELAY, "https://b.example", 2.0, setting="2 s between requests")
    waits.waited(Limiter.CRAWL_DELAY, "https://b.example", 4.0, setting="2 s between requests")
    waits.waited(Limiter.GLOBAL_CONCURRENCY, "", 0.0005, setting="16 requests at a time")  # taken at once
    assert [(limit.limiter, limit.waited_seconds, limit.requests) for limit in waits.limits(20.0)] == [
        (Limiter.CRAWL_DELAY, 6.0, 2),
        (Limiter.HOST_CONCURRENCY, 3.0, 1),
    ]
    # Over a minute, 3 s of waiting is less than a tenth of the time; and never less than a second.
    assert [limit.limiter for limit in waits.limits(60.0)] == [Limiter.CRAWL_DELAY]
    brief = RequestWaits()
    brief.waited(Limiter.HOST_CONCURRENCY, "a.example", 0.6, setting="4 requests at a time")
    assert brief.limits(0.5) == []
    assert str(waits.limits(60.0)[0]) == (
        "robots.txt Crawl-delay of https://b.example (2 s between requests): 2 requests waited 6.0 s in all"
    )


def test_a_changed_config_keeps_its_own_setting(web: WebServer) -> None:
    with Crawler(replace(CONFIG, per_host_concurrency=1)) as crawler:
        limits, _ = crawl(crawler, pages(web, "one", 3, delay=0.6))
    assert [(limit.setting, limit.requests) for limit in limits] == [("1 request at a time", 2)]
