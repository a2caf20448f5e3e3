"""The crawl engine against a real loopback web server: extraction, faults, robots.txt, conditional GET
and concurrency bounds. Every crawl must finish with the right status and reason for each URL."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.extract.page import normalize_content
from pipelines_dagster.core.crawl.headers import retry_after_seconds
from pipelines_dagster.core.crawl.types import CrawlerConfig, CrawlOutcome, PreviousFetch
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from tests.support.web import Reply, Request, StaticResolver, WebServer, html_document, page, redirect

BASE = CrawlerConfig(
    user_agent="pipelines-dagster-tests/1.0",
    global_concurrency=8,
    per_host_concurrency=4,
    connect_timeout=2,
    total_timeout=2,
    max_body_bytes=64 * 1024,
    max_attempts=3,
    backoff_base=0.05,
    backoff_factor=2,
    max_retry_delay=2,
    network=NetworkPolicy(allowed_networks=("127.0.0.1/32",)),
    extract_workers=2,
)
ARTICLE = (
    "Knowledge bases answer questions from documents that were crawled from the web.\n\n"
    "Each page is fetched once, its main text is extracted, and the result is stored as markdown."
)


pytestmark = pytest.mark.usefixtures("loopback_only")


@pytest.fixture(scope="module")
def crawler() -> Iterator[Crawler]:
    """The BASE crawler, shared so its extraction workers start once for the module."""
    with Crawler(BASE) as shared:
        yield shared


@pytest.fixture
def make_crawler() -> Iterator[Callable[..., Crawler]]:
    made: list[Crawler] = []

    def make(*, resolver: StaticResolver | None = None, **changes: Any) -> Crawler:
        made.append(Crawler(replace(BASE, **changes), resolver=resolver))
        return made[-1]

    yield make
    for each in made:
        each.close()


def by_path(outcomes: list[CrawlOutcome]) -> dict[str, CrawlOutcome]:
    return {outcome.url.split("/", 3)[3]: outcome for outcome in outcomes}


def test_html_is_extracted_to_markdown_with_metadata(web: WebServer, crawler: Crawler) -> None:
    html = (
        '<!DOCTYPE html><html lang="en-GB"><head><meta charset="utf-8"><title>Crawling Guide</title>'
        '<meta name="description" content="How the crawler reads pages">'
        '<meta name="author" content="Ada Lovelace">'
        '<meta property="article:published_time" content="2024-03-01"></head><body>'
        "<nav><a href='/'>Home</a> <a href='/about'>About</a></nav><article><h1>Crawling Guide</h1>"
        f"<p>{ARTICLE}</p><h2>Steps</h2><ul><li>fetch the page politely</li><li>extract the main text</li></ul>"
        "</article><footer>Copyright</footer></body></html>"
    )
    validators = {"ETag": '"v1"', "Last-Modified": "Fri, 01 Mar 2024 10:00:00 GMT"}
    web.route("/guide", Reply(body=html, headers=validators))
    [outcome] = crawler.crawl_all([web.url("/guide")])

    assert outcome.status == "success", outcome.error
    assert outcome.error is None and outcome.http_status == 200 and outcome.attempts == 1
    assert outcome.final_url == web.url("/guide")
    assert "# Crawling Guide" in outcome.content and "## Steps" in outcome.content
    assert "- fetch the page politely" in outcome.content
    assert "Copyright" not in outcome.content
    assert outcome.metadata == {
        "title": "Crawling Guide",
        "description": "How the crawler reads pages",
        "author": "Ada Lovelace",
        "date": "2024-03-01",
        "language": "en-GB",
    }
    assert outcome.raw_hash == hashlib.sha256(html.encode()).hexdigest()
    assert outcome.content_hash == hashlib.sha256(normalize_content(outcome.content).encode()).hexdigest()
    assert (outcome.etag, outcome.last_modified) == ('"v1"', "Fri, 01 Mar 2024 10:00:00 GMT")
    assert outcome.unchanged is False
    assert outcome.fetched_at.tzinfo is UTC and datetime.now(UTC) - outcome.fetched_at < timedelta(minutes=1)
    assert 0 < outcome.elapsed < 10
    assert web.requests[-1].headers["user-agent"] == BASE.user_agent


def test_plain_text_is_returned_as_is(web: WebServer, crawler: Crawler) -> None:
    text = "Release notes\n\n  * first line kept with its indent\n"
    web.route("/notes.txt", Reply(body=text, content_type="text/plain; charset=utf-8"))
    [outcome] = crawler.crawl_all([web.url("/notes.txt")])
    assert outcome.status == "success"
    assert outcome.content == text


def test_a_page_without_text_is_empty_with_a_reason(web: WebServer, crawler: Crawler) -> None:
    web.route("/blank", Reply(body="<html><head><title></title></head><body><nav></nav></body></html>"))
    web.route("/nothing", Reply(body=""))
    outcomes = by_path(crawler.crawl_all([web.url("/blank"), web.url("/nothing")]))
    for outcome in outcomes.values():
        assert outcome.status == "empty"
        assert outcome.error == "no text could be extracted from the page"
        assert outcome.content_hash is None and outcome.raw_hash is not None


def test_invalid_utf8_is_replaced_and_the_page_still_succeeds(web: WebServer, crawler: Crawler) -> None:
    broken = html_document("Broken bytes", ARTICLE).encode().replace(b"fetched once", b"fetched \xff\xfe once")
    latin = "<html><body><article><p>Café crème, très bien, voilà.</p></article></body></html>"
    web.route("/broken", Reply(body=broken))
    web.route("/latin", Reply(body=latin.encode("latin-1"), content_type="text/html; charset=iso-8859-1"))
    outcomes = by_path(crawler.crawl_all([web.url("/broken"), web.url("/latin")]))
    assert outcomes["broken"].status == "success", outcomes["broken"].error
    assert "\ufffd" in outcomes["broken"].content and "Knowledge bases" in outcomes["broken"].content
    assert outcomes["latin"].status == "success"
    assert "Café crème, très bien, voilà." in outcomes["latin"].content


def test_a_server_error_is_retried_until_it_succeeds(web: WebServer, crawler: Crawler) -> None:
    web.route("/flaky", Reply(status=500, body="boom"), page("Recovered", ARTICLE))
    web.route("/down", Reply(status=503, body="down"))
    outcomes = by_path(crawler.crawl_all([web.url("/flaky"), web.url("/down")]))
    assert outcomes["flaky"].status == "success"
    assert outcomes["flaky"].attempts == 2 and outcomes["flaky"].http_status == 200
    assert outcomes["down"].status == "failed"
    assert outcomes["down"].error == "HTTP 503 (gave up after 3 attempts)"
    assert outcomes["down"].attempts == 3 and web.hits("/down") == 3


def test_a_client_error_is_not_retried(web: WebServer, crawler: Crawler) -> None:
    [outcome] = crawler.crawl_all([web.url("/missing")])
    assert (outcome.status, outcome.error, outcome.http_status, outcome.attempts) == ("failed", "HTTP 404", 404, 1)
    assert web.hits("/missing") == 1


def test_retry_after_is_honoured(web: WebServer, crawler: Crawler) -> None:
    web.route("/busy", Reply(status=429, headers={"Retry-After": "1"}), page("Finally", ARTICLE))
    [outcome] = crawler.crawl_all([web.url("/busy")])
    assert outcome.status == "success" and outcome.attempts == 2
    assert outcome.elapsed >= 0.95


def test_retry_after_is_capped(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    web.route("/later", Reply(status=503, headers={"Retry-After": "3600"}), page("Soon", ARTICLE))
    started = time.monotonic()
    [outcome] = make_crawler(max_retry_delay=0.2).crawl_all([web.url("/later")])
    assert outcome.status == "success"
    assert time.monotonic() - started < 5


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("7", now=now) == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30.0
    assert retry_after_seconds(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now) == 0.0
    assert retry_after_seconds("soon", now=now) is None
    assert retry_after_seconds(None) is None


def test_a_slow_server_times_out_and_the_crawl_goes_on(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    web.route("/slow", Reply(body="late", delay=5))
    web.route("/fine", page("Fine", ARTICLE))
    impatient = make_crawler(total_timeout=0.5, max_attempts=2)
    outcomes = by_path(impatient.crawl_all([web.url("/slow"), web.url("/fine")]))
    assert outcomes["slow"].status == "failed"
    assert outcomes["slow"].error == "timed out after 0.5 s (gave up after 2 attempts)"
    assert outcomes["slow"].attempts == 2
    assert outcomes["fine"].status == "success"


def test_a_refused_connection_is_retried_then_fails(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago has no listener now
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    web.route("/up", page("Up", ARTICLE))
    # Without robots.txt, which would meet the refusal first (test_an_unreachable_robots_txt_...).
    outcomes = by_path(
        make_crawler(obey_robots=False).crawl_all([f"http://127.0.0.1:{closed_port}/down", web.url("/up")])
    )
    assert outcomes["down"].status == "failed"
    assert (outcomes["down"].error or "").startswith("connection failed: ")
    assert (outcomes["down"].error or "").endswith("(gave up after 3 attempts)")
    assert outcomes["down"].attempts == 3 and outcomes["down"].http_status is None
    assert outcomes["up"].status == "success"


def test_an_oversized_body_is_refused_while_streaming(web: WebServer, crawler: Crawler) -> None:
    big = b"<html><body><p>" + b"x" * (BASE.max_body_bytes + 1) + b"</p></body></html>"
    web.route("/declared", Reply(body=big))
    web.route("/undeclared", Reply(body=big, chunked=True))
    fits = b"<html><body><p>ok</p></body></html>".ljust(BASE.max_body_bytes)
    web.route("/just-fits", Reply(body=fits, chunked=True))
    outcomes = by_path(crawler.crawl_all([web.url("/declared"), web.url("/undeclared"), web.url("/just-fits")]))
    for name in ("declared", "undeclared"):
        assert outcomes[name].status == "failed"
        assert outcomes[name].error is not None
        assert outcomes[name].error.startswith(f"body larger than {BASE.max_body_bytes} bytes")
    assert outcomes["just-fits"].status == "success"


def test_redirects_are_followed_up_to_the_limit(web: WebServer, crawler: Crawler) -> None:
    web.route("/loop", redirect("/loop"))
    web.route("/old", redirect("/newer", status=301))
    web.route("/newer", redirect(web.url("/new")))
    web.route("/new", page("Moved", ARTICLE))
    outcomes = by_path(crawler.crawl_all([web.url("/loop"), web.url("/old")]))
    assert outcomes["loop"].status == "failed"
    assert outcomes["loop"].error == "too many redirects (more than 5)"
    assert web.hits("/loop") == 6
    assert outcomes["old"].status == "success"
    assert outcomes["old"].final_url == web.url("/new") and outcomes["old"].metadata["title"] == "Moved"


def test_types_that_are_neither_pages_nor_documents_are_refused(web: WebServer, crawler: Crawler) -> None:
    web.route("/logo.png", Reply(body=b"\x89PNG\r\n\x1a\n" + b"\0" * 64, content_type="image/png"))
    web.route("/untyped", Reply(body=b"??", content_type=None))
    web.route("/page.xhtml", Reply(body=html_document("XHTML", ARTICLE), content_type="application/xhtml+xml"))
    outcomes = by_path(crawler.crawl_all([web.url("/logo.png"), web.url("/untyped"), web.url("/page.xhtml")]))
    assert outcomes["logo.png"].status == "failed"
    assert (outcomes["logo.png"].error or "").startswith("unsupported content type 'image/png'")
    assert outcomes["logo.png"].http_status == 200
    assert (outcomes["untyped"].error or "").startswith("unsupported content type '(none declared)'")
    assert outcomes["page.xhtml"].status == "success"


def test_robots_txt_is_fetched_once_per_host_and_obeyed(web: WebServer, crawler: Crawler) -> None:
    rules = f"User-agent: {BASE.user_agent.split('/')[0]}\nDisallow: /private\n\nUser-agent: *\nDisallow: /\n"
    web.route("/robots.txt", Reply(body=rules, content_type="text/plain"))
    web.route("/private/report", page("Private", ARTICLE))
    for index in range(3):
        web.route(f"/public/{index}", page(f"Public {index}", ARTICLE))
    urls = [web.url("/private/report")] + [web.url(f"/public/{index}") for index in range(3)]
    outcomes = by_path(crawler.crawl_all(urls))
    assert outcomes["private/report"].status == "failed"
    assert outcomes["private/report"].error == "disallowed by robots.txt"
    assert web.hits("/private/report") == 0
    assert [outcomes[f"public/{index}"].status for index in range(3)] == ["success"] * 3
    assert web.hits("/robots.txt") == 1


def test_robots_txt_can_be_ignored_and_a_broken_one_allows_all(
    web: WebServer, make_crawler: Callable[..., Crawler]
) -> None:
    web.route("/robots.txt", Reply(body="User-agent: *\nDisallow: /\n", content_type="text/plain"))
    web.route("/page", page("Ignored rules", ARTICLE))
    [outcome] = make_crawler(obey_robots=False).crawl_all([web.url("/page")])
    assert outcome.status == "success" and web.hits("/robots.txt") == 0

    web.route("/robots.txt", Reply(status=404, body="none here"))
    [outcome] = make_crawler(max_attempts=1).crawl_all([web.url("/page")])
    assert outcome.status == "success"


def test_robots_crawl_delay_spaces_requests_to_the_origin(web: WebServer, crawler: Crawler) -> None:
    web.route("/robots.txt", Reply(body="User-agent: *\nCrawl-delay: 0.3\n", content_type="text/plain"))
    started: list[float] = []

    def timed(_request: Request) -> Reply:
        started.append(time.monotonic())
        return page("Paced", ARTICLE)

    for number in range(4):
        web.handle(f"/paced/{number}", timed)
    outcomes = crawler.crawl_all([web.url(f"/paced/{number}") for number in range(4)])
    assert [outcome.status for outcome in outcomes] == ["success"] * 4
    gaps = [later - earlier for earlier, later in zip(sorted(started), sorted(started)[1:], strict=False)]
    assert len(gaps) == 3 and min(gaps) >= 0.28, gaps  # per-host concurrency 4 would send them together


def test_a_long_crawl_delay_is_capped(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    web.route("/robots.txt", Reply(body="User-agent: *\nCrawl-delay: 3600\n", content_type="text/plain"))
    for number in range(3):
        web.route(f"/slowpoke/{number}", page("Slowpoke", ARTICLE))
    capped = make_crawler(max_crawl_delay=0.2)
    began = time.monotonic()
    outcomes = capped.crawl_all([web.url(f"/slowpoke/{number}") for number in range(3)])
    assert [outcome.status for outcome in outcomes] == ["success"] * 3
    assert 0.38 <= time.monotonic() - began < 30


def test_a_conditional_get_turns_304_into_unchanged(web: WebServer, crawler: Crawler) -> None:
    def etagged(request: Request) -> Reply:
        if request.headers.get("if-none-match") == '"rev-7"':
            return Reply(status=304, content_type=None, headers={"ETag": '"rev-7"'})
        return page("Versioned", ARTICLE, headers={"ETag": '"rev-7"'})

    web.handle("/doc", etagged)
    [first] = crawler.crawl_all([web.url("/doc")])
    assert first.status == "success" and first.etag == '"rev-7"' and not first.unchanged
    previous = PreviousFetch(etag=first.etag, raw_hash=first.raw_hash, content_hash=first.content_hash)

    [second] = crawler.crawl_all([web.url("/doc")], previous={web.url("/doc"): previous})
    assert web.requests[-1].headers["if-none-match"] == '"rev-7"'
    assert (second.status, second.http_status, second.unchanged) == ("success", 304, True)
    assert second.content == "" and second.error is None
    assert (second.content_hash, second.raw_hash, second.etag) == (first.content_hash, first.raw_hash, first.etag)


def test_identical_bytes_are_unchanged_even_without_conditional_support(web: WebServer, crawler: Crawler) -> None:
    web.route("/same", page("Stable", ARTICLE, headers={"Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"}))
    web.route("/edited", page("Edited", ARTICLE), page("Edited", ARTICLE + "\n\nA new paragraph."))
    [same, edited] = crawler.crawl_all([web.url("/same"), web.url("/edited")])
    previous = {
        outcome.url: PreviousFetch(
            last_modified=outcome.last_modified, raw_hash=outcome.raw_hash, content_hash=outcome.content_hash
        )
        for outcome in (same, edited)
    }
    again = by_path(crawler.crawl_all([web.url("/same"), web.url("/edited")], previous=previous))
    assert [request.headers.get("if-modified-since") for request in web.requests if request.path == "/same"] == [
        None,
        "Mon, 01 Jan 2024 00:00:00 GMT",
    ]
    assert (again["same"].status, again["same"].http_status, again["same"].unchanged) == ("success", 200, True)
    assert again["same"].content_hash == same.content_hash and again["same"].content == ""
    assert again["edited"].unchanged is False
    assert "A new paragraph." in again["edited"].content
    assert again["edited"].content_hash != edited.content_hash


def test_per_host_concurrency_is_bounded(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    for index in range(6):
        web.route(f"/slow/{index}", page(f"Slow {index}", ARTICLE, delay=0.3))
    outcomes = make_crawler(per_host_concurrency=2).crawl_all([web.url(f"/slow/{index}") for index in range(6)])
    assert [outcome.status for outcome in outcomes] == ["success"] * 6
    assert web.max_in_flight == 2


def test_global_concurrency_is_bounded_across_hosts(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    for index in range(8):
        web.route(f"/page/{index}", page(f"Page {index}", ARTICLE, delay=0.3))
    resolver = StaticResolver({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]})
    urls = [web.url(f"/page/{index}", host="a.test" if index % 2 else "b.test") for index in range(8)]
    crawler = make_crawler(resolver=resolver, global_concurrency=3, per_host_concurrency=2)
    outcomes = crawler.crawl_all(urls)
    assert [outcome.status for outcome in outcomes] == ["success"] * 8
    assert web.max_in_flight == 3


def test_connections_are_reused_within_a_crawl(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    for index in range(4):
        web.route(f"/k/{index}", page(f"Kept {index}", ARTICLE))
    outcomes = make_crawler(per_host_concurrency=1).crawl_all([web.url(f"/k/{index}") for index in range(4)])
    assert [outcome.status for outcome in outcomes] == ["success"] * 4
    assert web.connections == 1  # robots.txt and all four pages over one keep-alive connection


def test_outcomes_stream_as_they_complete_one_per_distinct_url(web: WebServer, crawler: Crawler) -> None:
    web.route("/slow", page("Slow", ARTICLE, delay=0.5))
    web.route("/quick", page("Quick", ARTICLE))
    urls = [web.url("/slow"), web.url("/quick"), web.url("/slow"), "not a url", web.url("/missing")]

    async def collect() -> list[CrawlOutcome]:
        return [outcome async for outcome in crawler.crawl(urls)]

    outcomes = asyncio.run(collect())
    assert outcomes[-1].url == web.url("/slow")
    assert sorted(outcome.url for outcome in outcomes) == sorted(set(urls))
    statuses = {outcome.url: outcome.status for outcome in outcomes}
    assert statuses == {
        web.url("/slow"): "success",
        web.url("/quick"): "success",
        "not a url": "failed",
        web.url("/missing"): "failed",
    }
    assert web.hits("/slow") == 1
    assert [outcome.url for outcome in crawler.crawl_all(urls)] == list(dict.fromkeys(urls))


def test_a_crawler_is_reusable_after_close(web: WebServer, make_crawler: Callable[..., Crawler]) -> None:
    web.route("/again", page("Again", ARTICLE))
    reusable = make_crawler()
    assert reusable.crawl_all([web.url("/again")])[0].status == "success"
    reusable.close()
    assert reusable.crawl_all([web.url("/again")])[0].status == "success"


def test_an_extraction_that_overruns_fails_its_url_with_the_reason(
    web: WebServer, make_crawler: Callable[..., Crawler]
) -> None:
    web.route("/long", page("Long", ARTICLE))
    web.route("/notes.txt", Reply(body="plain notes", content_type="text/plain"))
    hasty = make_crawler(extract_timeout=0.001)
    outcomes = by_path(hasty.crawl_all([web.url("/long"), web.url("/notes.txt")]))
    for outcome in outcomes.values():
        assert (outcome.status, outcome.error) == (
            "failed",
            "text extraction took longer than 0.001 s; its worker was stopped",
        )
        assert outcome.http_status == 200


def test_config_rejects_values_that_cannot_work() -> None:
    with pytest.raises(ValueError, match="per_host_concurrency must be at least 1"):
        CrawlerConfig(per_host_concurrency=0)
    with pytest.raises(ValueError, match="total_timeout must be a positive number of seconds"):
        CrawlerConfig(total_timeout=0)
    with pytest.raises(ValueError, match="extract_timeout must be a positive number of seconds"):
        CrawlerConfig(extract_timeout=-1)
