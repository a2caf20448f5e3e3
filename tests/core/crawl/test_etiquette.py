"""A connector's user agent and robots override on the wire: the user agent is what every request sends and what
robots.txt is read as; robots.txt is not even fetched on a waived host, and still obeyed on every other host the
crawl reaches (a redirect's target). And the checks of what is given: user agents, owned hosts, the waiver."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.etiquette import check_robots_waiver, validate_owned_hosts, validate_user_agent
from pipelines_dagster.core.crawl.types import CrawlOutcome, ListSource
from pipelines_dagster.core.errors import InvalidInputError
from tests.core.crawl.test_crawler import ARTICLE, BASE
from tests.support.web import Reply, StaticResolver, WebServer, page, redirect

pytestmark = pytest.mark.usefixtures("loopback_only")

DISALLOW_ALL = Reply(body="User-agent: *\nDisallow: /\n", content_type="text/plain")


def crawl(
    urls: list[str], resolver: StaticResolver, *, user_agent: str | None = None, waived: frozenset[str] = frozenset()
) -> dict[str, CrawlOutcome]:
    with Crawler(replace(BASE, max_attempts=1), resolver=resolver) as crawler:

        async def run() -> list[CrawlOutcome]:
            source = ListSource(urls)
            crawl = crawler.crawl_source(source, user_agent=user_agent, robots_waived=waived)
            return [outcome async for outcome in crawl]

        return {outcome.url: outcome for outcome in asyncio.run(run())}


@pytest.fixture
def resolver() -> StaticResolver:
    return StaticResolver({"docs.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})


def test_the_connectors_user_agent_is_sent_and_robots_txt_is_read_as_it(web: WebServer, resolver) -> None:
    web.route("/robots.txt", Reply(body="User-agent: acme-kb\nDisallow: /private\n", content_type="text/plain"))
    web.route("/private", page("Private", ARTICLE))
    url = web.url("/private", host="docs.test")

    [as_crawler] = crawl([url], resolver).values()
    assert as_crawler.status == "success"
    assert {request.headers["user-agent"] for request in web.requests} == {BASE.user_agent}

    [as_acme] = crawl([url], resolver, user_agent="acme-kb/1.0 (+https://acme.example/bot)").values()
    assert (as_acme.status, as_acme.error) == ("failed", "disallowed by robots.txt")
    assert web.requests[-1].path == "/robots.txt"
    assert web.requests[-1].headers["user-agent"] == "acme-kb/1.0 (+https://acme.example/bot)"


def test_a_waived_host_is_crawled_without_its_robots_txt_and_every_other_host_obeys_its_own(
    web: WebServer, resolver
) -> None:
    with WebServer() as other:
        web.route("/robots.txt", DISALLOW_ALL)
        web.route("/internal", page("Internal", ARTICLE))
        web.route("/hop", redirect(other.url("/landing", host="other.test")))
        other.route("/robots.txt", DISALLOW_ALL)
        other.route("/landing", page("Landing", ARTICLE))
        internal, hop = web.url("/internal", host="docs.test"), web.url("/hop", host="docs.test")

        obeyed = crawl([internal], resolver)
        assert obeyed[internal].error == "disallowed by robots.txt"

        outcomes = crawl([internal, hop], resolver, waived=frozenset({"docs.test"}))

    assert outcomes[internal].status == "success"
    # The redirect leaves the owned host: its target is another site's, whose robots.txt says no.
    assert (outcomes[hop].status, outcomes[hop].error) == ("failed", "disallowed by robots.txt")
    assert web.hits("/robots.txt") == 1  # the obeying crawl's; the waived one never asked
    assert other.hits("/robots.txt") == 1 and other.hits("/landing") == 0


@pytest.mark.parametrize("agent", ["acme-kb/1.0", "Mozilla/5.0 (compatible; AcmeBot/2.1; +https://acme.example/bot)"])
def test_a_user_agent_on_one_line_of_printable_ascii_is_taken(agent: str) -> None:
    assert validate_user_agent(agent) == agent


@pytest.mark.parametrize("agent", ["", " padded", "two\nlines", "tab\tinside", "ünïcode", "x" * 257])
def test_any_other_user_agent_is_refused_saying_what_one_is(agent: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        validate_user_agent(agent)
    assert refused.value.field == "user_agent" and "printable ASCII on one line" in refused.value.message


def test_owned_hosts_are_normalized_once_each_and_anything_else_is_refused() -> None:
    assert validate_owned_hosts(["Docs.Example.COM", "docs.example.com.", "10.0.0.7", "bücher.example"]) == [
        "docs.example.com",
        "10.0.0.7",
        "xn--bcher-kva.example",
    ]
    for given in ["https://docs.example.com", "docs.example.com:8443", "docs.example.com/path", "", "a b"]:
        with pytest.raises(InvalidInputError, match="no scheme, port or path"):
            validate_owned_hosts([given])


def test_the_waiver_takes_only_hosts_the_workspace_owns_and_no_subdomain_crawl() -> None:
    owned = ["docs.example.com", "wiki.example.com"]
    check_robots_waiver(frozenset({"docs.example.com"}), owned=owned, subdomains=False)
    with pytest.raises(InvalidInputError) as refused:
        check_robots_waiver(frozenset({"docs.example.com", "example.org"}), owned=owned, subdomains=False)
    assert "it does not own example.org" in refused.value.message and "--owned-host" in refused.value.message
    with pytest.raises(InvalidInputError, match="reaches hosts nobody declared"):
        check_robots_waiver(frozenset({"docs.example.com"}), owned=owned, subdomains=True)
