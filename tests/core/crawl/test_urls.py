"""URL normalization, one rule per case: hosts, ports, percent-encoding, dot segments, queries, and the
registrable domain of a host under a multi-part public suffix."""

from __future__ import annotations

import pytest

from pipelines_dagster.core.crawl.urls import absolute_url, normalize_url, registrable_domain
from pipelines_dagster.core.validation import MAX_URL_LENGTH


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        # scheme and host lower-cased
        ("HTTPS://Docs.Example.COM/Guide", "https://docs.example.com/Guide"),
        # IDNA host; a host's escapes decoded; one trailing dot dropped
        ("https://Bücher.example/", "https://xn--bcher-kva.example/"),
        ("https://ex%41mple.com/", "https://example.com/"),
        ("https://example.com./a", "https://example.com/a"),
        # default ports removed, others kept
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:80/a", "https://example.com:80/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        # fragment removed
        ("https://example.com/a#section-2", "https://example.com/a"),
        ("https://example.com/a?b=1#top", "https://example.com/a?b=1"),
        # empty path becomes /
        ("https://example.com", "https://example.com/"),
        ("https://example.com?q=1", "https://example.com/?q=1"),
        # percent-encoding: upper-case hex, unreserved decoded, reserved kept encoded
        ("https://example.com/a%2fb%3a", "https://example.com/a%2Fb%3A"),
        ("https://example.com/%7Euser/%41%62%2D%5F", "https://example.com/~user/Ab-_"),
        ("https://example.com/?q=%e2%82%ac", "https://example.com/?q=%E2%82%AC"),
        # what may not stand unencoded is encoded as UTF-8; a stray % is encoded too
        ("https://example.com/caf\u00e9 menu?q=a b", "https://example.com/caf%C3%A9%20menu?q=a%20b"),
        ("https://example.com/100%", "https://example.com/100%25"),
        ("https://example.com/a|b^c", "https://example.com/a%7Cb%5Ec"),
        # dot segments resolved, escaped dots included
        ("https://example.com/a/./b/../c", "https://example.com/a/c"),
        ("https://example.com/a/b/..", "https://example.com/a/"),
        ("https://example.com/../../a", "https://example.com/a"),
        ("https://example.com/a/%2E%2e/b", "https://example.com/b"),
        # query parameters keep their order; empty pairs and an empty query go
        ("https://example.com/s?z=1&a=2&m=3", "https://example.com/s?z=1&a=2&m=3"),
        ("https://example.com/s?a=1&&b=2&", "https://example.com/s?a=1&b=2"),
        ("https://example.com/s?", "https://example.com/s"),
        # IP hosts in their canonical form
        ("http://[2001:DB8:0:0::1]:8080/", "http://[2001:db8::1]:8080/"),
        ("http://127.0.0.1:80/x", "http://127.0.0.1/x"),
        # surrounding blanks, and tabs and newlines inside (a wrapped href), removed
        ("  https://example.com/a\n/b\t  ", "https://example.com/a/b"),
    ],
)
def test_normalization(url, normalized):
    assert normalize_url(url) == normalized
    assert normalize_url(normalized) == normalized  # normalizing twice changes nothing


@pytest.mark.parametrize(
    ("url", "kwargs", "normalized"),
    [
        (
            "https://example.com/p?utm_source=x&id=7&utm_medium=y&page=2",
            {"drop_query_params": frozenset({"utm_source", "utm_medium"})},
            "https://example.com/p?id=7&page=2",
        ),
        ("https://example.com/p?sid=1", {"drop_query_params": frozenset({"sid"})}, "https://example.com/p"),
        # a parameter named in escapes is the parameter
        ("https://example.com/p?%73id=1&x", {"drop_query_params": frozenset({"sid"})}, "https://example.com/p?x"),
        (
            "https://example.com/p?filter[tag]=a&b=1",
            {"drop_query_params": frozenset({"filter[tag]"})},
            "https://example.com/p?b=1",
        ),
        ("https://example.com/p?a=1&b=2#f", {"drop_all_query": True}, "https://example.com/p"),
    ],
)
def test_query_parameters_are_dropped_by_name_or_all(url, kwargs, normalized):
    assert normalize_url(url, **kwargs) == normalized


@pytest.mark.parametrize(
    "url",
    [
        "mailto:someone@example.com",
        "javascript:alert(1)",
        "data:text/html,<p>hi</p>",
        "tel:+46701234567",
        "ftp://example.com/file",
        "/relative/path",
        "relative",
        "//example.com/scheme-relative",
        "https://",
        "https:///path-without-host",
        "http:example.com",
        "https://user:secret@example.com/",
        "https://user@example.com/",
        "https://:@example.com/",
        "https://example.com:0/",
        "https://example.com:99999/",
        "http://[not-ipv6]/",
        "https://exa!mple.com/",
        "https://a..b.com/",
        "https://" + "a" * 64 + ".com/",  # a label longer than DNS allows
        "https://example.com/" + "a" * MAX_URL_LENGTH,
        "",
    ],
)
def test_what_is_not_an_absolute_http_url_with_a_host_is_refused(url):
    assert normalize_url(url) is None


def test_references_resolve_against_a_base_then_normalize():
    base = "https://example.com/docs/guide/"
    assert absolute_url("../api?v=1#x", base=base) == "https://example.com/docs/api?v=1"
    assert absolute_url("//cdn.example.com/a", base=base) == "https://cdn.example.com/a"
    assert absolute_url(" HTTPS://Other.example/ ", base=base) == "https://other.example/"
    assert absolute_url("mailto:x@example.com", base=base) is None
    assert absolute_url("http://[broken", base=base) is None


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("docs.example.co.uk", "example.co.uk"),
        ("example.co.uk", "example.co.uk"),
        ("a.b.example.com", "example.com"),
        ("co.uk", None),  # a public suffix itself
        ("alice.github.io", "alice.github.io"),  # the list's private section: each user's site is its own
        ("shop.example.xn--p1ai", "example.xn--p1ai"),  # an IDN suffix, in punycode
        ("127.0.0.1", None),
        ("[::1]", None),
    ],
)
def test_registrable_domains_come_from_the_public_suffix_list(host, domain):
    assert registrable_domain(host) == domain
