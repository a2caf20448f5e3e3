"""A connector's credentials on the wire, against real loopback servers: each kind gets a crawl through a site that
requires it, and nothing off the connector's own hosts receives one (a redirect's target, its robots.txt, an
off-scope link, a sitemap on another host), as their request logs show."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from dataclasses import replace

import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.credentials import CredentialHosts, Credentials, HostCredentials
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.crawl.site.frontier import Frontier
from pipelines_dagster.core.crawl.site.source import SiteSource
from pipelines_dagster.core.crawl.types import CrawlOutcome, ListSource, UrlSource
from tests.core.crawl.test_crawler import ARTICLE, BASE
from tests.support.web import Reply, Request, StaticResolver, WebServer, html_document, page, redirect

pytestmark = pytest.mark.usefixtures("loopback_only")

USER, PASSWORD = "crawler", "pa55-w0rd-basic-7c1f"
TOKEN = "tok-bearer-5b0e9a"
API_KEY = "key-header-2d84c6"
SESSION = "cookie-session-91fa3e"
SECRETS = (PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(), TOKEN, API_KEY, SESSION)
EVERY_KIND = Credentials(
    basic=(USER, PASSWORD), headers=[("X-Api-Key", API_KEY)], cookies=[("session", SESSION), ("theme", "dark")]
)
# The kinds one at a time, each with what a server that requires it checks.
KINDS = {
    "basic": (Credentials(basic=(USER, PASSWORD)), "authorization", f"Basic {SECRETS[1]}"),
    "bearer": (Credentials(bearer=TOKEN), "authorization", f"Bearer {TOKEN}"),
    "header": (Credentials(headers=[("X-Api-Key", API_KEY)]), "x-api-key", API_KEY),
    "cookie": (Credentials(cookies=[("session", SESSION)]), "cookie", f"session={SESSION}"),
}


@pytest.fixture
def other() -> Iterator[WebServer]:
    """Another site: a host the connector does not name."""
    with WebServer() as server:
        yield server


@pytest.fixture
def resolver() -> StaticResolver:
    return StaticResolver({"docs.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})


def carries_a_secret(request: Request) -> bool:
    return any(secret in value for value in request.headers.values() for secret in SECRETS)


def requiring(name: str, expected: str, reply: Reply) -> object:
    """A handler answering `reply` to a request whose `name` header is `expected`, else 401."""

    def handle(request: Request) -> Reply:
        if request.headers.get(name) != expected:
            return Reply(status=401, body="log in first", content_type="text/plain")
        return reply

    return handle


def crawl(source: UrlSource, credentials: HostCredentials | None, resolver: StaticResolver) -> dict[str, CrawlOutcome]:
    with Crawler(replace(BASE, max_attempts=1), resolver=resolver) as crawler:

        async def run() -> list[CrawlOutcome]:
            return [outcome async for outcome in crawler.crawl_source(source, credentials=credentials)]

        return {outcome.url: outcome for outcome in asyncio.run(run())}


def to_own_hosts(credentials: Credentials, *urls: str, subdomains: bool = False) -> HostCredentials:
    return HostCredentials(credentials, CredentialHosts(urls, subdomains=subdomains))


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_gets_a_crawl_through_a_site_that_requires_it(
    web: WebServer, resolver: StaticResolver, kind: str
) -> None:
    credentials, header, expected = KINDS[kind]
    web.handle("/private", requiring(header, expected, page("Private", ARTICLE)))
    url = web.url("/private", host="docs.test")

    [without] = crawl(ListSource([url]), None, resolver).values()
    assert (without.status, without.error) == ("failed", "HTTP 401")
    [outcome] = crawl(ListSource([url]), to_own_hosts(credentials, url), resolver).values()
    assert outcome.status == "success" and "Knowledge bases answer questions" in outcome.content


def test_a_cookie_the_site_set_is_kept_beside_the_connectors_own(web: WebServer, resolver: StaticResolver) -> None:
    web.route("/login", Reply(status=302, headers={"Location": "/private", "Set-Cookie": "visit=1; Path=/"}))
    web.route("/private", page("Private", ARTICLE))
    url = web.url("/login", host="docs.test")
    [outcome] = crawl(
        ListSource([url]), to_own_hosts(Credentials(cookies=[("session", SESSION)]), url), resolver
    ).values()
    assert outcome.status == "success"
    [landed] = [request for request in web.requests if request.path == "/private"]
    assert sorted(landed.headers["cookie"].split("; ")) == [f"session={SESSION}", "visit=1"]


def test_a_redirect_to_another_host_and_its_robots_txt_get_no_credential(
    web: WebServer, other: WebServer, resolver: StaticResolver
) -> None:
    web.route("/moved", redirect(other.url("/landing", host="other.test")))
    other.route("/landing", page("Landing", ARTICLE))
    url = web.url("/moved", host="docs.test")

    [outcome] = crawl(ListSource([url]), to_own_hosts(EVERY_KIND, url), resolver).values()

    assert outcome.status == "success" and outcome.final_url == other.url("/landing", host="other.test")
    # The own host's robots.txt and the first hop carry every credential; the other host's requests none.
    assert [request.path for request in web.requests] == ["/robots.txt", "/moved"]
    assert all(carries_a_secret(request) for request in web.requests)
    assert [request.path for request in other.requests] == ["/robots.txt", "/landing"]
    assert not any(carries_a_secret(request) for request in other.requests)


def test_a_redirect_from_another_host_back_to_an_own_host_carries_them_again(
    web: WebServer, other: WebServer, resolver: StaticResolver
) -> None:
    own = web.url("/start", host="docs.test")
    web.route("/start", page("Start", ARTICLE))
    web.route("/back", page("Back", ARTICLE))
    other.route("/bounce", redirect(web.url("/back", host="docs.test")))
    bounce = other.url("/bounce", host="other.test")

    outcomes = crawl(ListSource([bounce]), to_own_hosts(EVERY_KIND, own), resolver)

    assert outcomes[bounce].status == "success"
    assert not any(carries_a_secret(request) for request in other.requests)
    [back] = [request for request in web.requests if request.path == "/back"]
    assert carries_a_secret(back)


def test_a_site_crawl_sends_them_to_its_pages_and_to_no_off_scope_link_or_sitemap(
    web: WebServer, other: WebServer, resolver: StaticResolver
) -> None:
    off_site = other.url("/off", host="other.test")
    foreign_sitemap = other.url("/sitemap.xml", host="other.test")
    web.route(
        "/robots.txt", Reply(body=f"User-agent: *\nAllow: /\nSitemap: {foreign_sitemap}\n", content_type="text/plain")
    )
    web.route(
        "/sitemap.xml",
        Reply(
            body=f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{web.url('/listed', host='docs.test')}</loc></url>"
            f"<url><loc>{other.url('/listed-off', host='other.test')}</loc></url></urlset>",
            content_type="application/xml",
        ),
    )
    links = f"<a href='/linked'>own</a> <a href='{off_site}'>elsewhere</a>"
    web.route("/", Reply(body=html_document("Home", ARTICLE).replace("</article>", f"{links}</article>")))
    for path in ("/linked", "/listed"):
        web.route(path, page(path, ARTICLE))
    other.route("/off", page("Off", ARTICLE))
    other.route("/sitemap.xml", Reply(body="<urlset/>", content_type="application/xml"))

    start = web.url("/", host="docs.test")
    config = SiteConfig.validated(start_urls=[start], max_depth=2, max_pages=20)
    with Frontier(max_pages=config.max_pages, max_depth=config.max_depth) as frontier:
        source = SiteSource[CrawlOutcome](config, frontier)
        outcomes = crawl(source, to_own_hosts(EVERY_KIND, *config.start_urls), resolver)

    assert {url.rsplit("/", 1)[1] for url, outcome in outcomes.items() if outcome.status == "success"} == {
        "",
        "linked",
        "listed",
    }
    fetched = {request.path for request in web.requests}
    assert {"/robots.txt", "/sitemap.xml", "/", "/linked", "/listed"} <= fetched
    assert all(carries_a_secret(request) for request in web.requests)
    # Off the site nothing is requested at all, so nothing there could have been given a credential.
    assert other.requests == []


def test_credentials_go_to_no_host_the_address_guard_refuses(web: WebServer, resolver: StaticResolver) -> None:
    private = StaticResolver({**resolver.answers, "intranet.test": ["10.1.2.3"]})
    url = "http://intranet.test/"
    [outcome] = crawl(ListSource([url]), to_own_hosts(EVERY_KIND, url), private).values()
    assert outcome.status == "failed" and "10.1.2.3" in (outcome.error or "")
    assert web.requests == []
