"""Fetcher.fetch_resource, what a rendered page's requests go through: the address guard on every hop,
a size cap, one attempt, and no robots.txt (robots rules the document, not what it loads)."""

from __future__ import annotations

import asyncio

import pytest

from pipelines_dagster.core.crawl.types import Resource
from tests.core.crawl.render.conftest import guarded_fetcher
from tests.support.web import Reply, StaticResolver, WebServer, redirect

pytestmark = pytest.mark.usefixtures("loopback_only")


def fetch(url: str, *, resolver: StaticResolver | None = None) -> Resource | str:
    async def run() -> Resource | str:
        async with guarded_fetcher(resolver=resolver) as fetcher:
            return await fetcher.fetch_resource(url)

    return asyncio.run(run())


def test_a_resource_comes_back_decoded_with_its_headers(web: WebServer) -> None:
    web.route("/data.json", Reply(body='{"text": "hello"}', content_type="application/json", headers={"X-Kind": "a"}))
    resource = fetch(web.url("/data.json"))
    assert isinstance(resource, Resource)
    assert (resource.status, resource.body, resource.headers["x-kind"]) == (200, b'{"text": "hello"}', "a")
    assert "content-length" not in {name.lower() for name in resource.headers}


def test_robots_txt_does_not_hold_back_a_pages_resources(web: WebServer) -> None:
    web.route("/robots.txt", Reply(body="User-agent: *\nDisallow: /\n", content_type="text/plain"))
    web.route("/app.js", Reply(body="1", content_type="text/javascript"))
    assert isinstance(fetch(web.url("/app.js")), Resource)
    assert web.hits("/robots.txt") == 0


def test_a_redirect_to_a_private_address_is_refused_before_it_is_requested(web: WebServer, private: WebServer) -> None:
    web.route("/hop", redirect(private.url("/secret")))
    refusal = fetch(web.url("/hop"))
    assert isinstance(refusal, str) and "127.0.0.2" in refusal
    assert (web.hits("/hop"), private.requests) == (1, [])


def test_a_name_resolving_to_a_private_address_is_refused(private: WebServer) -> None:
    resolver = StaticResolver({"intranet.test": ["127.0.0.2"]})
    refusal = fetch(private.url("/secret", host="intranet.test"), resolver=resolver)
    assert isinstance(refusal, str) and "127.0.0.2" in refusal
    assert private.requests == []


def test_a_body_past_the_cap_or_an_error_status_is_refused_after_one_attempt(web: WebServer) -> None:
    web.route("/big.js", Reply(body="x" * (64 * 1024 + 1), content_type="text/javascript"))
    web.route("/broken.js", Reply(status=503, body="down"))
    assert fetch(web.url("/big.js")) == "body larger than 65536 bytes (65537 declared)"
    assert fetch(web.url("/broken.js")) == "HTTP 503"
    assert web.hits("/broken.js") == 1
