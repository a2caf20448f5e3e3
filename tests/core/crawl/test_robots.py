"""robots.txt as RFC 9309 reads it, on a loopback server: the first 500 KiB of a large one, 4xx as
allow-all, 5xx or no answer as a host disallowed for the run (with the reason on each URL), and
up to five redirects followed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.robots import ROBOTS_MAX_BYTES
from tests.core.crawl.test_crawler import ARTICLE, BASE, by_path
from tests.support.web import Reply, WebServer, page, redirect

pytestmark = pytest.mark.usefixtures("loopback_only")

RULES = "User-agent: *\nDisallow: /private\n"


@pytest.fixture(scope="module")
def crawler() -> Iterator[Crawler]:
    with Crawler(BASE) as shared:
        yield shared


def pages(web: WebServer, *paths: str) -> list[str]:
    for path in paths:
        web.route(path, page(path, ARTICLE))
    return [web.url(path) for path in paths]


def test_a_robots_txt_larger_than_500_kib_is_obeyed_from_its_first_500_kib(web: WebServer, crawler: Crawler) -> None:
    padding = "# padding\n" * (10 * 1024 * 1024 // 10)
    web.route("/robots.txt", Reply(body=RULES + padding + "Disallow: /late\n", content_type="text/plain", chunked=True))
    outcomes = by_path(crawler.crawl_all(pages(web, "/private/a", "/late", "/public")))
    assert (outcomes["private/a"].status, outcomes["private/a"].error) == ("failed", "disallowed by robots.txt")
    assert web.hits("/private/a") == 0
    # A rule past the first ROBOTS_MAX_BYTES is not read.
    assert len(RULES + padding) > ROBOTS_MAX_BYTES
    assert outcomes["late"].status == "success" and outcomes["public"].status == "success"


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_a_robots_txt_answering_4xx_allows_all(web: WebServer, crawler: Crawler, status: int) -> None:
    web.route("/robots.txt", Reply(status=status, body="no", content_type="text/plain"))
    [outcome] = crawler.crawl_all(pages(web, "/private/a"))
    assert outcome.status == "success"


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_robots_txt_answering_5xx_disallows_the_host_for_the_run(web: WebServer, status: int) -> None:
    web.route("/robots.txt", Reply(status=status, body="down", content_type="text/plain"))
    urls = pages(web, "/a", "/b")
    with Crawler(replace(BASE, max_attempts=2)) as crawler:
        outcomes = crawler.crawl_all(urls)
    for outcome in outcomes:
        assert outcome.status == "failed"
        assert outcome.error == (
            f"robots.txt answered HTTP {status} (gave up after 2 attempts); the host is not crawled this run "
            "(RFC 9309: assume complete disallow), the next crawl tries again"
        )
    assert web.hits("/a") == web.hits("/b") == 0
    assert web.hits("/robots.txt") == 2  # once per crawl, with its retries


def test_a_robots_txt_that_cannot_be_reached_disallows_the_host(web: WebServer) -> None:
    web.route("/robots.txt", Reply(body=RULES, content_type="text/plain", delay=2))
    with Crawler(replace(BASE, total_timeout=0.3, max_attempts=1)) as crawler:
        [outcome] = crawler.crawl_all(pages(web, "/public"))
    assert outcome.status == "failed"
    assert outcome.error == (
        "robots.txt could not be reached: timed out after 0.3 s; the host is not crawled this run "
        "(RFC 9309: assume complete disallow), the next crawl tries again"
    )
    assert web.hits("/public") == 0


def test_robots_txt_follows_five_redirects_whatever_the_crawls_limit(web: WebServer) -> None:
    web.route("/robots.txt", redirect("/hop/1"))
    for hop in range(1, 5):
        web.route(f"/hop/{hop}", redirect(f"/hop/{hop + 1}", status=301))
    web.route("/hop/5", Reply(body=RULES, content_type="text/plain"))
    with Crawler(replace(BASE, max_redirects=0)) as crawler:
        outcomes = by_path(crawler.crawl_all(pages(web, "/private/a", "/public")))
    assert outcomes["private/a"].error == "disallowed by robots.txt"
    assert outcomes["public"].status == "success"


def test_more_than_five_robots_redirects_is_unavailable_and_allows_all(web: WebServer, crawler: Crawler) -> None:
    web.route("/robots.txt", redirect("/hop/1"))
    for hop in range(1, 6):
        web.route(f"/hop/{hop}", redirect(f"/hop/{hop + 1}"))
    web.route("/hop/6", Reply(body=RULES, content_type="text/plain"))
    [outcome] = crawler.crawl_all(pages(web, "/private/a"))
    assert outcome.status == "success"
    assert web.hits("/hop/6") == 0
