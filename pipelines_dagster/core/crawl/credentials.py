"""A connector's credentials for a site behind a login (basic auth, a bearer token, headers, cookies), checked
as they are given, and the hosts they may be sent to: the connector's own, never another.

A value here is never shown: the repr of `Credentials` names what is set, and `shown` says the same for a
reader (names of headers and cookies, never a value). Nor is a value ever put in an error message.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from pipelines_dagster.core.crawl.urls import host_of, normalize_url, registrable_domain
from pipelines_dagster.core.errors import InvalidInputError

MAX_HEADERS = 20
MAX_COOKIES = 50
MAX_VALUE_LENGTH = 4096
# RFC 9110's token: what a header or cookie name may be made of.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Visible ASCII, with spaces and tabs inside: a header value that cannot split a request (no CR, LF or NUL).
_FIELD_VALUE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?$")
# RFC 6265's cookie-octets, optionally in double quotes: no space, comma, semicolon, backslash or quote.
_COOKIE_OCTETS = r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"
_COOKIE_VALUE = re.compile(rf'^(?:{_COOKIE_OCTETS}|"{_COOKIE_OCTETS}")$')
# RFC 6750's b64token, the form a bearer token takes.
_BEARER = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")

# Headers a connector may not set, lower-case, and what to do instead. The crawler owns how a request is framed,
# what it accepts and what makes it conditional; the connection's own headers are httpx's.
_REFUSED_HEADERS = {
    "authorization": "give basic auth or a bearer token as such, not as a header",
    "cookie": "give cookies as such, not as a header",
    "user-agent": "the crawler sends its own user agent",
    "host": "the host is the URL's",
    "accept": "the crawler accepts the content types it can read",
    "accept-encoding": "the crawler decodes the encodings it accepts",
    "range": "the crawler reads whole pages",
    "if-none-match": "the crawler makes its own conditional requests",
    "if-modified-since": "the crawler makes its own conditional requests",
    **dict.fromkeys(
        (
            "content-length",
            "transfer-encoding",
            "connection",
            "keep-alive",
            "upgrade",
            "te",
            "trailer",
            "expect",
            "proxy-authorization",
            "proxy-connection",
        ),
        "it belongs to the connection, which the crawler makes",
    ),
}


class Credentials:
    """What a crawl sends to the connector's own hosts, checked. Immutable; its repr names what is set and
    shows no value."""

    __slots__ = ("_basic", "_bearer", "_cookies", "_headers")

    def __init__(
        self,
        *,
        basic: tuple[str, str] | None = None,
        bearer: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        cookies: Iterable[tuple[str, str]] = (),
    ) -> None:
        self._basic = _checked_basic(*basic) if basic is not None else None
        self._bearer = _checked_bearer(bearer) if bearer is not None else None
        if self._basic is not None and self._bearer is not None:
            raise InvalidInputError("auth", "give basic auth or a bearer token, not both: both are an Authorization")
        self._headers = _checked_pairs(headers, field="auth.headers", check=_checked_header, most=MAX_HEADERS)
        self._cookies = _checked_pairs(cookies, field="auth.cookies", check=_checked_cookie, most=MAX_COOKIES)
        if not (self._basic or self._bearer or self._headers or self._cookies):
            raise InvalidInputError("auth", "no credential given: give basic auth, a bearer token, headers or cookies")

    @classmethod
    def parse(
        cls, *, basic: str | None, bearer: str | None, headers: Iterable[str], cookies: Iterable[str]
    ) -> Credentials | None:
        """Credentials as the CLI gives them: `USER:PASS`, a token, `Name: value` lines and `name=value` pairs;
        None when none is given."""
        headers, cookies = list(headers), list(cookies)
        if basic is None and bearer is None and not headers and not cookies:
            return None
        return cls(
            # A password is taken as it is, spaces and all.
            basic=_split(basic, ":", field="auth.basic", form="USER:PASSWORD", strip=False) if basic else None,
            bearer=bearer,
            headers=[_split(line, ":", field="auth.headers", form="'Name: value'") for line in headers],
            cookies=[_split(pair, "=", field="auth.cookies", form="name=value") for pair in cookies],
        )

    def shown(self) -> dict[str, Any]:
        """What a reader may see: which kinds are set, and the names of the headers and cookies."""
        return {
            "basic": self._basic is not None,
            "bearer": self._bearer is not None,
            "headers": [name for name, _ in self._headers],
            "cookies": [name for name, _ in self._cookies],
        }

    def request_headers(self, *, cookie: str | None = None) -> dict[str, str]:
        """The headers a request to an own host carries; `cookie` is the Cookie header it would carry without
        them (the crawl's own cookies), whose cookies of the same names these replace."""
        headers = dict(self._headers)
        if self._basic is not None:
            user_pass = f"{self._basic[0]}:{self._basic[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(user_pass).decode("ascii")
        elif self._bearer is not None:
            headers["Authorization"] = f"Bearer {self._bearer}"
        if self._cookies:
            own = {name for name, _ in self._cookies}
            pairs = (pair.strip() for pair in (cookie or "").split(";"))
            kept = [pair for pair in pairs if pair and pair.partition("=")[0] not in own]
            headers["Cookie"] = "; ".join([*kept, *(f"{name}={value}" for name, value in self._cookies)])
        return headers

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "basic": list(self._basic) if self._basic else None,
                "bearer": self._bearer,
                "headers": self._headers,
                "cookies": self._cookies,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Credentials:
        stored = orjson.loads(data)
        return cls(
            basic=(stored["basic"][0], stored["basic"][1]) if stored["basic"] else None,
            bearer=stored["bearer"],
            headers=[(name, value) for name, value in stored["headers"]],
            cookies=[(name, value) for name, value in stored["cookies"]],
        )

    def __repr__(self) -> str:
        shown = self.shown()
        kinds = [kind for kind in ("basic", "bearer") if shown[kind]]
        kinds += [f"{kind}={names}" for kind, names in shown.items() if isinstance(names, list) and names]
        return f"Credentials({', '.join(kinds)})"


def _split(given: str, separator: str, *, field: str, form: str, strip: bool = True) -> tuple[str, str]:
    name, found, value = given.partition(separator)
    if not found or not name.strip():
        # What was given may be a secret: a refusal names the form it takes, never what was given.
        raise InvalidInputError(field, f"give it as {form}")
    return (name.strip(), value.strip()) if strip else (name, value)


def _checked_basic(user: str, password: str) -> tuple[str, str]:
    if not user or ":" in user:
        raise InvalidInputError("auth.basic", "the user name must be given and hold no colon (USER:PASSWORD)")
    for part in (user, password):
        if len(part) > MAX_VALUE_LENGTH or any(ord(char) < 0x20 or ord(char) == 0x7F for char in part):
            raise InvalidInputError(
                "auth.basic", f"user name and password hold no control characters and {MAX_VALUE_LENGTH} at most"
            )
    return user, password


def _checked_bearer(token: str) -> str:
    if len(token) > MAX_VALUE_LENGTH or not _BEARER.match(token):
        raise InvalidInputError(
            "auth.bearer",
            f"a bearer token is letters, digits and -._~+/ (then = padding), {MAX_VALUE_LENGTH} characters at most",
        )
    return token


def _checked_header(name: str, value: str) -> None:
    if not _TOKEN.match(name):
        raise InvalidInputError("auth.headers", "a header name is letters, digits and !#$%&'*+-.^_`|~ only")
    if (why := _REFUSED_HEADERS.get(name.lower())) is not None:
        raise InvalidInputError("auth.headers", f"header {name} cannot be set: {why}")
    if name.lower().startswith(("sec-", "proxy-")):
        raise InvalidInputError("auth.headers", f"header {name} cannot be set: a Sec- or Proxy- header is not a site's")
    if len(value) > MAX_VALUE_LENGTH or not _FIELD_VALUE.match(value):
        raise InvalidInputError(
            "auth.headers",
            f"the value of header {name} must be printable ASCII without line breaks, {MAX_VALUE_LENGTH} characters "
            "at most",
        )


def _checked_cookie(name: str, value: str) -> None:
    if not _TOKEN.match(name):
        raise InvalidInputError("auth.cookies", "a cookie name is letters, digits and !#$%&'*+-.^_`|~ only")
    if len(value) > MAX_VALUE_LENGTH or not _COOKIE_VALUE.match(value):
        raise InvalidInputError(
            "auth.cookies",
            f"the value of cookie {name} may hold no space, comma, semicolon, backslash, quote or control character "
            f"(RFC 6265), {MAX_VALUE_LENGTH} characters at most",
        )


def _checked_pairs(
    pairs: Iterable[tuple[str, str]], *, field: str, check: Any, most: int
) -> tuple[tuple[str, str], ...]:
    checked: dict[str, tuple[str, str]] = {}
    for name, value in pairs:
        check(name, value)
        if name.lower() in checked:
            raise InvalidInputError(field, f"{name} is given twice: give each once")
        checked[name.lower()] = (name, value)
    if len(checked) > most:
        raise InvalidInputError(field, f"at most {most} may be given")
    return tuple(checked.values())


class CredentialHosts:
    """The hosts a connector's credentials go to: those of its URLs (a site crawl's start URLs, with their
    registrable domains when it takes subdomains), whatever the port, as a site crawl's scope judges them.

    Over plain http only to a host one of those URLs names with http: a redirect from https to http on the
    same host does not take the credentials along in clear text."""

    __slots__ = ("_domains", "_hosts", "_plain_domains", "_plain_hosts")

    def __init__(self, urls: Iterable[str], *, subdomains: bool = False) -> None:
        normalized = [url for url in map(normalize_url, urls) if url is not None]
        self._hosts = frozenset(map(host_of, normalized))
        self._plain_hosts = frozenset(host_of(url) for url in normalized if url.startswith("http:"))
        self._domains = _domains(self._hosts) if subdomains else frozenset()
        self._plain_domains = _domains(self._plain_hosts) if subdomains else frozenset()

    def covers(self, url: str) -> bool:
        """Whether a request to `url` may carry the credentials."""
        normalized = normalize_url(url)
        if normalized is None:
            return False
        host = host_of(normalized)
        if normalized.startswith("http:"):
            return host in self._plain_hosts or _under(host, self._plain_domains)
        return host in self._hosts or _under(host, self._domains)

    def names(self) -> frozenset[str]:
        """Where they go, as comparable names: a change that adds one sends them somewhere new."""
        return frozenset(
            [*self._hosts, *(f"http://{host}" for host in self._plain_hosts)]
            + [f"*.{domain}" for domain in self._domains]
            + [f"http://*.{domain}" for domain in self._plain_domains]
        )


def _domains(hosts: frozenset[str]) -> frozenset[str]:
    return frozenset(filter(None, map(registrable_domain, hosts)))


def _under(host: str, domains: frozenset[str]) -> bool:
    return bool(domains) and registrable_domain(host) in domains


class HostCredentials:
    """Credentials with the hosts they go to: what a crawl is handed. Its repr shows no value."""

    __slots__ = ("credentials", "hosts")

    def __init__(self, credentials: Credentials, hosts: CredentialHosts) -> None:
        self.credentials = credentials
        self.hosts = hosts

    def headers_for(self, url: str, *, cookie: str | None = None) -> Mapping[str, str]:
        """The headers a request to `url` carries: the credentials' on an own host, none elsewhere."""
        return self.credentials.request_headers(cookie=cookie) if self.hosts.covers(url) else {}

    def __repr__(self) -> str:
        return f"HostCredentials({self.credentials!r}, to {sorted(self.hosts.names())})"
