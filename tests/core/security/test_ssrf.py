"""The SSRF guard: address policy, one checked lookup per host, pinned connections, and the crawler refusing
private targets (directly, through DNS and through redirects) before any packet is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from ipaddress import ip_address
from typing import Any

import httpx
import pytest

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.types import CrawlerConfig
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.core.security.ssrf import (
    AddressGuard,
    BlockedAddressError,
    PinnedTransport,
    UnresolvableHostError,
    resolve_system,
)
from tests.support.web import StaticResolver, WebServer, confine_to_loopback, page, redirect

LOOPBACK_ONLY = NetworkPolicy(allowed_networks=("127.0.0.1/32",))
FAST = CrawlerConfig(max_attempts=1, connect_timeout=2, total_timeout=2, extract_workers=1)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    confine_to_loopback(monkeypatch)


@pytest.fixture
def web() -> Iterator[WebServer]:
    with WebServer() as server:
        yield server


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("10.0.0.1", "private network"),
        ("172.16.5.4", "private network"),
        ("192.168.1.1", "private network"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "not publicly routable"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("ff02::1", "multicast"),
        ("::", "unspecified"),
        ("2001:db8::1", "not publicly routable"),
        ("::ffff:10.0.0.1", "private network"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a00:1", "private network"),
        # 6to4 relays to the IPv4 address in bits 16-48; Teredo to its (obfuscated) client address.
        ("2002:a9fe:a9fe::1", "the IPv6 form of 169.254.169.254, link-local"),
        ("2002:7f00:1::1", "the IPv6 form of 127.0.0.1, loopback"),
        ("2002:a00:1:ffff::2", "the IPv6 form of 10.0.0.1, private network"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "the IPv6 form of 127.0.0.1, loopback"),
        ("2001:0:4136:e378:8000:63bf:5601:5601", "the IPv6 form of 169.254.169.254, link-local"),
        ("fec0::1", "site-local"),
        ("feff:ffff::1", "site-local"),
    ],
)
def test_non_public_addresses_are_refused(address: str, reason: str) -> None:
    refusal = NetworkPolicy().refusal(ip_address(address))
    assert refusal is not None and reason in refusal


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:93.184.216.34", "2002:808:808::1"]
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert NetworkPolicy().refusal(ip_address(address)) is None


def test_allowed_networks_open_exactly_what_they_list() -> None:
    assert LOOPBACK_ONLY.refusal(ip_address("127.0.0.1")) is None
    assert LOOPBACK_ONLY.refusal(ip_address("::ffff:127.0.0.1")) is None
    assert LOOPBACK_ONLY.refusal(ip_address("127.0.0.2")) == "loopback"
    assert LOOPBACK_ONLY.refusal(ip_address("::1")) == "loopback"
    assert "private network" in (LOOPBACK_ONLY.refusal(ip_address("10.0.0.1")) or "")


def test_allow_private_networks_still_refuses_non_unicast_targets() -> None:
    policy = NetworkPolicy(allow_private_networks=True)
    for address in ("10.0.0.1", "127.0.0.1", "169.254.169.254", "100.64.0.1", "fd00::1", "::1"):
        assert policy.refusal(ip_address(address)) is None
    assert policy.refusal(ip_address("224.0.0.1")) == "multicast"
    assert policy.refusal(ip_address("0.0.0.0")) == "unspecified address"


def test_a_malformed_allowed_network_says_how_to_write_one() -> None:
    with pytest.raises(ValueError, match=r"allowed_networks: .*'127\.0\.0\.1/32'"):
        NetworkPolicy(allowed_networks=("10.0.0.1/8",))


def test_every_answer_is_checked_and_one_private_answer_blocks_the_host() -> None:
    guard = AddressGuard(NetworkPolicy(), resolver=StaticResolver({"mixed.test": ["93.184.216.34", "10.0.0.1"]}))
    with pytest.raises(BlockedAddressError, match=r"blocked address 10\.0\.0\.1 for host 'mixed\.test'"):
        asyncio.run(guard.addresses("mixed.test"))


def test_public_answers_are_returned_in_resolver_order_without_duplicates() -> None:
    resolver = StaticResolver({"public.test": ["93.184.216.34", "2606:2800:220:1::1", "93.184.216.34"]})
    guard = AddressGuard(NetworkPolicy(), resolver=resolver)
    assert asyncio.run(guard.addresses("public.test")) == ("93.184.216.34", "2606:2800:220:1::1")


def test_literal_addresses_are_checked_without_a_lookup() -> None:
    resolver = StaticResolver({})
    guard = AddressGuard(NetworkPolicy(), resolver=resolver)
    with pytest.raises(BlockedAddressError, match=r"blocked address 10\.0\.0\.1: private network"):
        asyncio.run(guard.addresses("10.0.0.1"))
    assert resolver.lookups == []


def test_a_host_is_looked_up_once_per_guard_even_when_asked_concurrently() -> None:
    resolver = StaticResolver({"a.test": ["127.0.0.1"]})
    guard = AddressGuard(LOOPBACK_ONLY, resolver=resolver)

    async def ask_many() -> list[tuple[str, ...]]:
        return await asyncio.gather(*(guard.addresses("a.test") for _ in range(5)))

    assert asyncio.run(ask_many()) == [("127.0.0.1",)] * 5
    assert resolver.lookups == ["a.test"]


def test_an_unknown_host_is_unresolvable() -> None:
    guard = AddressGuard(NetworkPolicy(), resolver=StaticResolver({}))
    with pytest.raises(UnresolvableHostError, match=r"could not resolve host 'nowhere\.test'"):
        asyncio.run(guard.addresses("nowhere.test"))


def test_a_resolver_that_hangs_fails_the_url_within_the_connect_timeout() -> None:
    async def hanging(host: str) -> list[str]:
        await asyncio.sleep(60)
        return ["93.184.216.34"]

    with Crawler(replace(FAST, connect_timeout=0.2), resolver=hanging) as crawler:
        [outcome] = crawler.crawl_all(["http://slow-dns.test/"])
    assert outcome.status == "failed"
    assert outcome.error == "resolving 'slow-dns.test' timed out after 0.2 s"
    assert outcome.elapsed < 2


def test_the_default_resolver_uses_the_system_resolver() -> None:
    assert "127.0.0.1" in asyncio.run(resolve_system("localhost"))


def test_the_connection_layer_refuses_a_blocked_host_by_itself() -> None:
    guard = AddressGuard(NetworkPolicy(), resolver=StaticResolver({"internal.test": ["10.0.0.1"]}))

    async def get() -> None:
        async with httpx.AsyncClient(transport=PinnedTransport(guard)) as client:
            await client.get("http://internal.test/")

    with pytest.raises(BlockedAddressError, match=r"10\.0\.0\.1"):
        asyncio.run(get())


def test_the_connection_goes_to_the_checked_address_with_the_hostname_kept(web: WebServer) -> None:
    web.route("/pinned", page("Pinned", "Reached through a pinned address."))
    resolver = StaticResolver({"public.test": ["127.0.0.1"]})
    with Crawler(_config(LOOPBACK_ONLY), resolver=resolver) as crawler:
        [outcome] = crawler.crawl_all([web.url("/pinned", host="public.test")])
    assert outcome.status == "success", outcome.error
    assert outcome.metadata["title"] == "Pinned"
    assert [request.headers["host"] for request in web.requests if request.path == "/pinned"] == [
        f"public.test:{web.port}"
    ]
    assert resolver.lookups == ["public.test"]


def test_a_rebinding_answer_after_the_check_is_never_used(web: WebServer) -> None:
    # First answer loopback (allowed), every later one a private address: a guard that resolved
    # again at connect time would hit the private one.
    answers = iter([["127.0.0.1"]])
    lookups: list[str] = []

    async def rebinding(host: str) -> list[str]:
        lookups.append(host)
        return next(answers, ["10.0.0.1"])

    for index in range(3):
        web.route(f"/r{index}", page(f"Page {index}", "Same host, same address."))
    urls = [web.url(f"/r{index}", host="rebind.test") for index in range(3)]
    with Crawler(_config(LOOPBACK_ONLY, per_host_concurrency=1), resolver=rebinding) as crawler:
        outcomes = crawler.crawl_all(urls)
    assert [outcome.status for outcome in outcomes] == ["success"] * 3
    assert lookups == ["rebind.test"]


def test_private_targets_are_refused_before_any_request(web: WebServer) -> None:
    resolver = StaticResolver(
        {
            "loopback.test": ["127.0.0.1"],
            "internal.test": ["10.0.0.1"],
            "metadata.test": ["169.254.169.254"],
            "v6loopback.test": ["::1"],
        }
    )
    urls = [
        web.url("/", host="loopback.test"),
        "http://internal.test/",
        "http://metadata.test/latest/meta-data/",
        f"http://v6loopback.test:{web.port}/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/iam/",
        f"http://[::1]:{web.port}/",
        "http://[::1]/",
        web.url("/"),
        "http://[::ffff:10.0.0.1]/",
        "http://100.64.0.1/",
        f"http://0.0.0.0:{web.port}/",
    ]
    with Crawler(FAST, resolver=resolver) as crawler:
        outcomes = crawler.crawl_all(urls)
    for outcome in outcomes:
        assert outcome.status == "failed", outcome.url
        assert outcome.error is not None and "blocked address" in outcome.error, (outcome.url, outcome.error)
        assert outcome.http_status is None
    assert web.requests == []


def test_a_redirect_to_a_private_address_is_refused_before_connecting(web: WebServer) -> None:
    web.route("/to-literal", redirect("http://10.0.0.1/admin"))
    web.route("/to-name", redirect("http://internal.test/"))
    web.route("/to-metadata", redirect("http://169.254.169.254/latest/meta-data/", status=301))
    web.route("/to-loopback-name", redirect(web.url("/secret", host="loopback.test")))
    web.route("/secret", page("Secret", "Must not be fetched."))
    resolver = StaticResolver({"internal.test": ["10.0.0.1"], "loopback.test": ["127.0.0.2"]})
    paths = ["/to-literal", "/to-name", "/to-metadata", "/to-loopback-name"]
    with Crawler(_config(LOOPBACK_ONLY), resolver=resolver) as crawler:
        outcomes = crawler.crawl_all([web.url(path) for path in paths])
    for outcome in outcomes:
        assert outcome.status == "failed"
        assert outcome.error is not None and "blocked address" in outcome.error, outcome.error
        assert outcome.http_status in {301, 302}
    assert outcomes[0].final_url == "http://10.0.0.1/admin"
    assert web.hits("/secret") == 0


@pytest.mark.parametrize("url", ["ftp://example.com/file", "file:///etc/passwd", "gopher://example.com/"])
def test_only_http_and_https_are_fetched(url: str) -> None:
    with Crawler(FAST, resolver=StaticResolver({})) as crawler:
        [outcome] = crawler.crawl_all([url])
    assert outcome.status == "failed"
    assert outcome.error is not None and "http:// or https://" in outcome.error


def test_allow_private_networks_lets_the_crawler_reach_loopback(web: WebServer) -> None:
    web.route("/inside", page("Inside", "A page on a private network."))
    with Crawler(_config(NetworkPolicy(allow_private_networks=True))) as crawler:
        [outcome] = crawler.crawl_all([web.url("/inside")])
    assert outcome.status == "success", outcome.error


def test_the_system_resolver_answer_for_localhost_is_checked_too(web: WebServer) -> None:
    with Crawler(FAST) as crawler:
        [outcome] = crawler.crawl_all([web.url("/", host="localhost")])
    assert outcome.status == "failed"
    assert outcome.error is not None and "blocked address 127.0.0.1 for host 'localhost'" in outcome.error
    assert web.requests == []


def _config(network: NetworkPolicy, **changes: Any) -> CrawlerConfig:
    return replace(FAST, network=network, **changes)
