"""URL normalization: one form per page, so discovery de-duplicates, and the host and registrable
domain a site crawl's scope is judged by (`site.scope`).

Normalization follows RFC 3986 section 6 (case, percent-encoding, dot segments, default ports),
plus what a crawl wants on top: no fragment, and without the query parameters the config drops.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import unquote, unquote_plus, urljoin, urlsplit

import idna
from publicsuffixlist import PublicSuffixList

from pipelines_dagster.core.validation import MAX_URL_LENGTH

_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# An escape, or a character that may not stand unencoded in a path or query. Allowed are the
# unreserved characters, sub-delims, ":" "@" "/" "?", and the brackets, which query parameter
# names use (`filter[tag]`). A "%" that starts no escape is itself encoded.
_ESCAPE_OR_DISALLOWED = re.compile(r"%([0-9A-Fa-f]{2})|[^A-Za-z0-9\-._~!$&'()*+,;=:@/?\[\]]")
# WHATWG's URL parser strips C0 controls and spaces around a URL and removes tabs and newlines
# anywhere in it, as browsers do with an href that wraps.
_C0_AND_SPACE = "".join(chr(code) for code in range(0x21))
_TABS_AND_NEWLINES = re.compile(r"[\t\n\r]")
_ABSOLUTE = re.compile(r"^https?://", re.IGNORECASE)
_HOST = re.compile(r"^[a-z0-9_-]+(?:\.[a-z0-9_-]+)*$")
# What might be an IP address, so the (slow to fail) ipaddress parse is tried on nothing else.
_IP_LIKE = re.compile(r"^[0-9.]+$|:")
_MAX_HOST_LENGTH = 253
_MAX_LABEL_LENGTH = 63


def normalize_url(
    url: str, *, drop_query_params: frozenset[str] = frozenset(), drop_all_query: bool = False
) -> str | None:
    """`url` in its normalized form, or None when it is not an absolute http(s) URL with a host.

    Lower-case scheme and host, the host in IDNA (punycode), no default port, no fragment, `/` for
    an empty path, percent-encoding with upper-case hex and unreserved characters decoded, dot
    segments resolved; `drop_query_params` removed from the query (or all of it with
    `drop_all_query`), the other parameters kept in their order. None too for a URL that carries
    credentials, or one longer than a listed URL may be: a discovered URL that long is a crawl
    trap, not a page. Normalizing a normalized URL changes nothing.
    """
    candidate = _TABS_AND_NEWLINES.sub("", url.strip(_C0_AND_SPACE))
    # Decoding shrinks an escape to a third at most, so a longer input cannot fit: refused unread.
    if len(candidate) > 3 * MAX_URL_LENGTH:
        return None
    try:
        parts = urlsplit(candidate)
        port = parts.port
    except ValueError:  # a bad port, or brackets around something that is not an IPv6 address
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or "@" in parts.netloc or port == 0:
        return None
    host = _normalize_host(parts.hostname or "")
    if host is None:
        return None
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _remove_dot_segments(_normalize_encoding(parts.path)) if parts.path else "/"
    query = _normalize_query(parts.query, drop_query_params=drop_query_params, drop_all=drop_all_query)
    normalized = f"{scheme}://{netloc}{path}?{query}" if query else f"{scheme}://{netloc}{path}"
    return normalized if len(normalized) <= MAX_URL_LENGTH else None


def absolute_url(reference: str, *, base: str) -> str | None:
    """`reference` (an href, a sitemap's <loc>) resolved against `base`, then normalized; None as
    normalize_url says, or when the two do not make a URL."""
    reference = _TABS_AND_NEWLINES.sub("", reference.strip(_C0_AND_SPACE))
    if _ABSOLUTE.match(reference):
        return normalize_url(reference)  # most sitemap entries: no need to join (urljoin is slow)
    try:
        joined = urljoin(base, reference)
    except ValueError:  # brackets around something that is not an IPv6 address
        return None
    return normalize_url(joined)


def host_of(url: str) -> str:
    """The host of a normalized URL as normalize_url wrote it: without its port, IPv6 in brackets."""
    netloc = urlsplit(url).netloc
    if netloc.endswith("]") or ":" not in netloc:
        return netloc
    return netloc.rpartition(":")[0]


def path_and_query(url: str) -> str:
    """What a site config's include and exclude patterns match: the path, and `?query` when there is one."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def _normalize_host(hostname: str) -> str | None:
    # urlsplit has lower-cased the host and taken IPv6 out of its brackets. Escapes in a host are
    # decoded as WHATWG does (`%65xample.com` is example.com), and one trailing dot is dropped.
    host = unquote(hostname).lower().removesuffix(".")
    if (address := _ip_address(host)) is not None:
        return f"[{address.compressed}]" if address.version == 6 else address.compressed
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except UnicodeError:  # idna.IDNAError is one
            return None
    # Underscores are kept: a few real hosts have them, though IDNA allows none.
    valid = (
        _HOST.match(host) is not None
        and len(host) <= _MAX_HOST_LENGTH
        and all(len(label) <= _MAX_LABEL_LENGTH for label in host.split("."))
    )
    return host if valid else None


def _normalize_encoding(text: str) -> str:
    """Upper-case hex in every escape, unreserved characters decoded, the rest encoded as UTF-8."""
    return _ESCAPE_OR_DISALLOWED.sub(_normalize_escape, text)


def _normalize_escape(match: re.Match[str]) -> str:
    if (hex_digits := match.group(1)) is not None:
        decoded = chr(int(hex_digits, 16))
        return decoded if decoded in _UNRESERVED else "%" + hex_digits.upper()
    return "".join(f"%{byte:02X}" for byte in match.group(0).encode("utf-8", "surrogatepass"))


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 on an absolute path whose escapes are normalized (`%2E` is a dot by then)."""
    segments = path.split("/")[1:]
    output: list[str] = []
    for segment in segments:
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    # A path that ends in a dot segment names a directory, so it keeps a trailing slash.
    if segments[-1] in {".", ".."}:
        output.append("")
    return "/" + "/".join(output)


def _normalize_query(query: str, *, drop_query_params: frozenset[str], drop_all: bool) -> str:
    if drop_all or not query:
        return ""
    return "&".join(
        _normalize_encoding(pair)
        for pair in query.split("&")
        if pair and unquote_plus(pair.partition("=")[0]) not in drop_query_params
    )


@functools.cache
def _public_suffixes() -> PublicSuffixList:
    # The list the package ships: nothing is fetched. Parsed once, on first use.
    return PublicSuffixList()


def registrable_domain(host: str) -> str | None:
    """A normalized host's public suffix plus one label (`docs.example.co.uk` is under
    example.co.uk); None for an IP address, or for a host that is itself a public suffix."""
    if host.startswith("[") or _ip_address(host) is not None:
        return None
    return _public_suffixes().privatesuffix(host)


def _ip_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if _IP_LIKE.search(host) is None:
        return None
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
