"""A site crawl's scope: which discovered URLs belong to the site, by host, registrable domain and path."""

from __future__ import annotations

import pytest

from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.crawl.site.scope import Scope


def site(*start_urls: str, **kwargs) -> Scope:
    return Scope.of(SiteConfig.validated(start_urls=list(start_urls), **kwargs))


@pytest.mark.parametrize(
    ("scope", "url", "allowed"),
    [
        # the start URLs' hosts, whatever the scheme, port, case or path
        (site("https://docs.example.co.uk/start"), "http://DOCS.example.co.uk:8443/other", True),
        (site("https://docs.example.co.uk/"), "https://www.example.co.uk/", False),
        (site("https://docs.example.co.uk/"), "https://example.co.uk/", False),
        (site("https://a.example.com/", "https://b.example.org/"), "https://b.example.org/x", True),
        # subdomains: under a start URL's registrable domain, with the multi-part suffix
        (site("https://docs.example.co.uk/", subdomains=True), "https://www.example.co.uk/", True),
        (site("https://docs.example.co.uk/", subdomains=True), "https://example.co.uk/", True),
        (site("https://docs.example.co.uk/", subdomains=True), "https://deep.a.b.example.co.uk/", True),
        (site("https://docs.example.co.uk/", subdomains=True), "https://other.co.uk/", False),
        (site("https://docs.example.co.uk/", subdomains=True), "https://example.co.uk.evil.com/", False),
        (site("https://alice.github.io/", subdomains=True), "https://bob.github.io/", False),
        # an IP host only matches itself, with or without subdomains
        (site("http://127.0.0.1:8765/", subdomains=True), "http://127.0.0.1:9000/page", True),
        (site("http://127.0.0.1:8765/", subdomains=True), "http://127.0.0.2/", False),
        (site("http://[::1]/", subdomains=True), "http://[0:0::1]/a", True),
        # include and exclude, on the path and query of the normalized URL
        (site("https://e.com/", include=["/docs/**"]), "https://e.com/docs/a/b", True),
        (site("https://e.com/", include=["/docs/**"]), "https://e.com/blog/a", False),
        (site("https://e.com/", include=["/docs/**"]), "https://e.com/x/../docs/a", True),
        (site("https://e.com/", exclude=["/docs/private/**"]), "https://e.com/docs/private/k", False),
        (site("https://e.com/", exclude=["/search?*"]), "https://e.com/search?q=x", False),
        (site("https://e.com/", exclude=["/search?*"]), "https://e.com/search", True),
        (
            site("https://e.com/", exclude=["/p?*"], drop_query_params="utm_source"),
            "https://e.com/p?utm_source=x",
            True,
        ),
        (site("https://e.com/", exclude=["/p?*"], drop_query_params="all"), "https://e.com/p?id=1", True),
        # what normalize_url refuses is never in scope
        (site("https://e.com/"), "mailto:a@e.com", False),
        (site("https://e.com/"), "https://user:pw@e.com/", False),
    ],
)
def test_scope(scope, url, allowed):
    assert scope.allows(url) is allowed


def test_a_scope_without_subdomains_keeps_no_domains():
    assert site("https://docs.example.co.uk/").domains == frozenset()
    assert site("https://docs.example.co.uk/", subdomains=True).domains == {"example.co.uk"}
    assert site("http://127.0.0.1/", subdomains=True).domains == frozenset()
