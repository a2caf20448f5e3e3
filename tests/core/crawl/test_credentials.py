"""Credentials as given and as shown: every malformed one refused with a sentence that names what to fix and never
the value, the headers each kind makes, a repr and a reader's view that show names only, and the hosts they go to."""

from __future__ import annotations

import base64

import pytest

from pipelines_dagster.core.crawl.credentials import CredentialHosts, Credentials, HostCredentials
from pipelines_dagster.core.errors import InvalidInputError

SECRET = "s3cr3t-v4lue"


def refusal(**given: object) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as refused:
        Credentials.parse(**{"basic": None, "bearer": None, "headers": (), "cookies": (), **given})  # type: ignore[arg-type]
    assert SECRET not in str(refused.value), "a refusal must not repeat a credential"
    return refused.value


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        ({"basic": SECRET}, "auth.basic", "USER:PASSWORD"),
        ({"basic": f":{SECRET}"}, "auth.basic", "USER:PASSWORD"),
        ({"basic": f"user:{SECRET}\n"}, "auth.basic", "no control characters"),
        ({"bearer": f"{SECRET} with spaces"}, "auth.bearer", "bearer token is letters"),
        ({"bearer": f"{SECRET}\r\nX-Evil: 1"}, "auth.bearer", "bearer token is letters"),
        ({"headers": [f"X-Api-Key {SECRET}"]}, "auth.headers", "'Name: value'"),
        ({"headers": [f"X-Api-Key: {SECRET}\r\nHost: evil.example"]}, "auth.headers", "without line breaks"),
        ({"headers": [f"X Key: {SECRET}"]}, "auth.headers", "a header name is letters"),
        ({"headers": [f"Host: {SECRET}"]}, "auth.headers", "header Host cannot be set: the host is the URL's"),
        ({"headers": [f"content-length: {SECRET}"]}, "auth.headers", "belongs to the connection"),
        ({"headers": [f"Authorization: Bearer {SECRET}"]}, "auth.headers", "give basic auth or a bearer token as such"),
        ({"headers": [f"Cookie: a={SECRET}"]}, "auth.headers", "give cookies as such"),
        ({"headers": [f"Sec-Fetch-Site: {SECRET}"]}, "auth.headers", "Sec- or Proxy-"),
        ({"headers": [f"X-A: {SECRET}", f"x-a: {SECRET}"]}, "auth.headers", "given twice"),
        ({"headers": [f"X-A: {SECRET}é"]}, "auth.headers", "printable ASCII"),
        ({"cookies": [SECRET]}, "auth.cookies", "name=value"),
        ({"cookies": [f"session={SECRET}; other=1"]}, "auth.cookies", "no space, comma, semicolon"),
        ({"cookies": [f"bad name={SECRET}"]}, "auth.cookies", "a cookie name is letters"),
        ({"cookies": [f"c{n}={SECRET}" for n in range(51)]}, "auth.cookies", "at most 50"),
        ({"basic": f"user:{SECRET}", "bearer": SECRET}, "auth", "not both"),
    ],
)
def test_a_malformed_credential_is_refused_naming_the_field_and_never_the_value(
    given: dict[str, object], field: str, says: str
) -> None:
    refused = refusal(**given)
    assert refused.field == field and says in refused.message


def test_nothing_given_is_none_and_an_empty_set_is_refused() -> None:
    assert Credentials.parse(basic=None, bearer=None, headers=(), cookies=()) is None
    with pytest.raises(InvalidInputError, match="no credential given"):
        Credentials()


def test_each_kind_makes_its_header() -> None:
    basic = Credentials.parse(basic="ada:pa ss:word ", bearer=None, headers=(), cookies=())
    assert basic is not None
    # The password is taken as given, colons and spaces included.
    assert basic.request_headers() == {"Authorization": "Basic " + base64.b64encode(b"ada:pa ss:word ").decode()}
    bearer = Credentials(bearer="eyJhbGciOi.eyJzdWIi.c2lnbg==")
    assert bearer.request_headers() == {"Authorization": "Bearer eyJhbGciOi.eyJzdWIi.c2lnbg=="}
    made = Credentials.parse(basic=None, bearer=None, headers=["X-Api-Key:  k1 "], cookies=["a=1", 'b="2"'])
    assert made is not None
    assert made.request_headers(cookie="theme=dark; a=stale") == {"X-Api-Key": "k1", "Cookie": 'theme=dark; a=1; b="2"'}


def test_what_is_shown_names_kinds_and_names_never_a_value() -> None:
    credentials = Credentials(basic=("ada", SECRET), headers=[("X-Api-Key", SECRET)], cookies=[("session", SECRET)])
    assert credentials.shown() == {"basic": True, "bearer": False, "headers": ["X-Api-Key"], "cookies": ["session"]}
    hosts = HostCredentials(credentials, CredentialHosts(["https://docs.example.com/"]))
    for shown in (repr(credentials), str(credentials), repr(hosts), f"{[hosts]}"):
        assert SECRET not in shown and "ada" not in shown
    assert repr(credentials) == "Credentials(basic, headers=['X-Api-Key'], cookies=['session'])"


def test_a_stored_form_round_trips() -> None:
    credentials = Credentials(bearer="t0k", headers=[("X-A", "1")], cookies=[("s", "2")])
    again = Credentials.from_json(credentials.to_json())
    assert again.request_headers() == credentials.request_headers() and again.shown() == credentials.shown()


def test_they_go_to_the_hosts_of_the_urls_whatever_the_port_and_path() -> None:
    hosts = CredentialHosts(["https://docs.example.com/guide", "http://staging.example.com:8080/"])
    assert hosts.covers("https://docs.example.com:8443/other?q=1")
    assert hosts.covers("https://DOCS.example.com./x")
    assert hosts.covers("http://staging.example.com/")
    assert not hosts.covers("https://example.com/")
    assert not hosts.covers("https://api.docs.example.com/")
    assert not hosts.covers("https://docs.example.com.evil.test/")
    assert not hosts.covers("https://user:pw@docs.example.com/")
    assert not hosts.covers("not a url")


def test_never_in_clear_text_to_a_host_named_with_https() -> None:
    hosts = CredentialHosts(["https://docs.example.com/"])
    assert hosts.covers("https://docs.example.com/a")
    assert not hosts.covers("http://docs.example.com/a")  # a downgrading redirect
    both = CredentialHosts(["https://docs.example.com/", "http://docs.example.com/legacy"])
    assert both.covers("http://docs.example.com/other")


def test_a_site_taking_subdomains_covers_its_registrable_domain() -> None:
    hosts = CredentialHosts(["https://docs.example.co.uk/"], subdomains=True)
    assert hosts.covers("https://api.example.co.uk/") and hosts.covers("https://example.co.uk/")
    assert not hosts.covers("https://other.co.uk/")
    assert not CredentialHosts(["https://docs.example.co.uk/"]).covers("https://api.example.co.uk/")
    assert hosts.names() == {"docs.example.co.uk", "*.example.co.uk"}
