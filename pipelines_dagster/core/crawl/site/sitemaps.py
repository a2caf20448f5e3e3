"""Sitemaps (sitemaps.org): the pages and child sitemaps a sitemap lists, and where to look for one.

A sitemap is parsed as a stream, so memory stays flat however many URLs it lists, and as
untrusted XML: no DTD is loaded, no entity is expanded, nothing is fetched.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import io
import itertools
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import cast
from urllib.parse import urlsplit

from lxml import etree

from pipelines_dagster.core.crawl.urls import absolute_url, normalize_url
from pipelines_dagster.core.validation import MAX_URL_LENGTH

SITEMAP_PATH = "/sitemap.xml"
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK_BYTES = 64 * 1024
_XML_WHITESPACE = b" \t\r\n"
# A line of a plain-text sitemap that is a page: the protocol asks for full URLs.
_ABSOLUTE_LINE = re.compile(r"^https?://", re.IGNORECASE)
_MAX_LINE_BYTES = 3 * MAX_URL_LENGTH
# A sitemap's root, and its entries: pages in a <urlset>, child sitemaps in a <sitemapindex>; in
# any namespace or none.
_SITEMAP_TAGS = ("{*}urlset", "{*}sitemapindex", "{*}url", "{*}sitemap")
# W3C Datetime (https://www.w3.org/TR/NOTE-datetime): a year, a month or a day alone, or a day and a
# time to the minute, second or fraction. Read leniently: a space for the T, a zone without its colon,
# or none (taken as UTC).
_W3C_DATETIME = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?\s*(Z|[+-]\d{2}:?\d{2})?)?)?)?"
)


class SitemapError(ValueError):
    """A body that cannot be read as a sitemap; the message names the sitemap and says why."""


@dataclass(frozen=True, slots=True)
class SitemapUrl:
    """A page a sitemap lists: its normalized URL, and when the site says it last changed."""

    loc: str
    lastmod: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Sitemap:
    """What one sitemap lists: pages (a <urlset>) or child sitemaps (a <sitemapindex>).

    `truncated` says the sitemap lists more than was read: entries past `max_urls`, or a document
    longer than `max_bytes`, whose entries before the cut are kept.
    """

    urls: list[SitemapUrl]
    sitemaps: list[str]
    truncated: bool


def parse_sitemap(body: bytes, *, base_url: str, max_urls: int, max_bytes: int) -> Sitemap:
    """The entries of the sitemap `body` fetched from `base_url`, gzip-compressed or not: XML, or
    the plain-text form (one URL a line) when it does not start with `<`.

    At most `max_urls` entries and `max_bytes` of (decompressed) XML or text are read. Each <loc> is
    resolved against `base_url` and normalized; one that is not an http(s) URL is skipped, as is
    a <lastmod> that is not a W3C datetime (the entry is kept without it). Raises SitemapError for
    a body that is not gzip where its magic bytes say so, not well-formed XML, not a <urlset> or
    <sitemapindex>, that declares a DTD, or text with no URL in it.
    """
    chunks = _document(body, base_url=base_url)
    first = next(chunks, b"")
    # XML starts with its first tag, after a byte-order mark perhaps (UTF-16 has zero bytes in it).
    if first and not first.removeprefix(codecs.BOM_UTF8).lstrip(_XML_WHITESPACE).startswith(
        (b"<", b"\xff\xfe", b"\xfe\xff")
    ):
        return _text_sitemap(
            itertools.chain([first], chunks), base_url=base_url, max_urls=max_urls, max_bytes=max_bytes
        )
    return _xml_sitemap(itertools.chain([first], chunks), base_url=base_url, max_urls=max_urls, max_bytes=max_bytes)


def _xml_sitemap(chunks: Iterator[bytes], *, base_url: str, max_urls: int, max_bytes: int) -> Sitemap:
    # Events for the root and its entries alone: an entry's <loc> and <lastmod> are read from it
    # when it ends, and the elements between make no event, nor any Python object.
    parser = etree.XMLPullParser(
        events=("start", "end"),
        tag=_SITEMAP_TAGS,
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    urls: list[SitemapUrl] = []
    sitemaps: list[str] = []
    layout: _Layout | None = None
    depth = read = 0
    try:
        for chunk in chunks:
            parser.feed(chunk[: max_bytes - read])
            read += len(chunk)
            # Start and end events carry elements; lxml's type hints do not tell the kinds of event apart.
            for event, element in cast(Iterator[tuple[str, etree._Element]], parser.read_events()):
                if event == "start":
                    depth += 1
                    if layout is None:
                        layout = _Layout.of(element, base_url=base_url)
                    continue
                depth -= 1
                if depth != 1 or layout is None:
                    continue  # the root's end, or a <url> or <sitemap> inside an entry
                if element.tag == layout.entry and (loc := _loc(element.findtext(layout.loc), base_url=base_url)):
                    if len(urls) + len(sitemaps) == max_urls:
                        return Sitemap(urls=urls, sitemaps=sitemaps, truncated=True)
                    if layout.index:
                        sitemaps.append(loc)
                    else:
                        urls.append(SitemapUrl(loc=loc, lastmod=parse_w3c_datetime(element.findtext(layout.lastmod))))
                # Read: free the entry, and the emptied ones before it, so the tree holds only the
                # entries the parser has read ahead.
                element.clear()
                if (parent := element.getparent()) is not None:
                    while (previous := element.getprevious()) is not None:
                        parent.remove(previous)
            if read > max_bytes:
                if layout is None:
                    raise SitemapError(
                        f"sitemap {base_url} is not a sitemap: no <urlset> or <sitemapindex> in its first "
                        f"{max_bytes} bytes"
                    )
                return Sitemap(urls=urls, sitemaps=sitemaps, truncated=True)
        if read == 0:
            raise SitemapError(f"sitemap {base_url} is empty")
        root = parser.close()
    except etree.XMLSyntaxError as exc:
        raise SitemapError(f"sitemap {base_url} is not well-formed XML: {exc}") from None
    if layout is None:
        raise _not_a_sitemap(root, base_url=base_url)
    return Sitemap(urls=urls, sitemaps=sitemaps, truncated=False)


def _text_sitemap(chunks: Iterator[bytes], *, base_url: str, max_urls: int, max_bytes: int) -> Sitemap:
    """A plain-text sitemap: one absolute http(s) URL a line (UTF-8); other lines are skipped."""
    urls: list[SitemapUrl] = []
    truncated = False
    for line in _text_lines(chunks, max_bytes=max_bytes):
        if line is None:
            truncated = True
            break
        text = line.decode("utf-8", "replace").strip().removeprefix("\ufeff")
        if not _ABSOLUTE_LINE.match(text) or (loc := normalize_url(text)) is None:
            continue
        if len(urls) == max_urls:
            return Sitemap(urls=urls, sitemaps=[], truncated=True)
        urls.append(SitemapUrl(loc=loc))
    if not urls:
        raise SitemapError(f"sitemap {base_url} is not a sitemap: neither XML nor a text file of URLs")
    return Sitemap(urls=urls, sitemaps=[], truncated=truncated)


def _text_lines(chunks: Iterator[bytes], *, max_bytes: int) -> Iterator[bytes | None]:
    """The lines of at most `max_bytes` of text; a last None says the text went on (the line cut
    there is not yielded). A line longer than any URL is kept only to its first bytes, so a body
    without newlines costs no more than its length."""
    read, rest = 0, b""
    for chunk in chunks:
        *complete, rest = (rest + chunk[: max_bytes - read]).split(b"\n")
        rest = rest[: _MAX_LINE_BYTES + 1]
        read += len(chunk)
        yield from complete
        if read > max_bytes:
            yield None
            return
    yield rest


def sitemap_candidates(start_url: str, robots_sitemaps: Iterable[str]) -> list[str]:
    """Where a site crawl looks for sitemaps: those robots.txt names (Protego's `rules.sitemaps`),
    then /sitemap.xml of the start URL's origin; normalized and de-duplicated, in that order."""
    start = normalize_url(start_url)
    if start is None:
        return list(dict.fromkeys(url for url in map(normalize_url, robots_sitemaps) if url is not None))
    parts = urlsplit(start)
    origin = f"{parts.scheme}://{parts.netloc}"
    # robots.txt should name absolute URLs; a relative one is read against robots.txt itself.
    candidates = [absolute_url(url, base=f"{origin}/robots.txt") for url in robots_sitemaps]
    candidates.append(origin + SITEMAP_PATH)
    return list(dict.fromkeys(url for url in candidates if url is not None))


# A sitemap's entries often share a lastmod (the time it was generated): parsed once, and one
# object kept for all of them.
@functools.lru_cache(maxsize=1024)
def parse_w3c_datetime(text: str | None) -> datetime | None:
    """A W3C datetime (a sitemap's <lastmod>) in UTC; a date alone is its midnight UTC. None when
    `text` is none, or not such a datetime."""
    match = _W3C_DATETIME.fullmatch(text.strip()) if text else None
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    zone = zone or "Z"
    try:
        offset = timedelta(hours=int(zone[1:3]), minutes=int(zone[-2:])) if zone != "Z" else timedelta(0)
        parsed = datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=timezone(-offset if zone.startswith("-") else offset),
        )
    except ValueError:  # a month 13, a day 31 of a short month, a zone past 24 hours
        return None
    return parsed.astimezone(UTC)


def _document(body: bytes, *, base_url: str) -> Iterator[bytes]:
    """The XML in chunks, decompressed when `body` is gzip (by its magic bytes, whatever the URL
    says). Lazily: a caller that stops reading stops the decompression, so a gzip bomb is cut off."""
    if body.startswith(_GZIP_MAGIC):
        chunks = _gunzipped(body, base_url=base_url)
    else:
        chunks = (body[start : start + _CHUNK_BYTES] for start in range(0, len(body), _CHUNK_BYTES))
    # Many sites emit a blank line before the XML declaration, which XML forbids; browsers and
    # search engines read such a sitemap all the same.
    for chunk in chunks:
        if started := chunk.lstrip(_XML_WHITESPACE):
            yield started
            break
    yield from chunks


def _gunzipped(body: bytes, *, base_url: str) -> Iterator[bytes]:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as stream:
            while chunk := stream.read(_CHUNK_BYTES):
                yield chunk
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise SitemapError(f"sitemap {base_url} is not a valid gzip file: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class _Layout:
    """Whether a sitemap is an index, and its entry, <loc> and <lastmod> tags in its root's
    namespace (the sitemaps.org one, an older one, or none): an extension's <image:loc> is not the page's.
    `of` the first <urlset>, <sitemapindex>, <url> or <sitemap> element: the root of a sitemap."""

    index: bool
    entry: str
    loc: str
    lastmod: str

    @classmethod
    def of(cls, root: etree._Element, *, base_url: str) -> _Layout:
        # Entities are never expanded here, but a sitemap has no use for a DTD at all, and one
        # that declares entities would otherwise yield URLs cut short at each reference.
        if root.getroottree().docinfo.internalDTD is not None:
            raise SitemapError(
                f"sitemap {base_url} declares a DTD (<!DOCTYPE>), which no sitemap has; refused as unsafe XML"
            )
        name = etree.QName(root)
        if name.localname not in {"urlset", "sitemapindex"}:
            raise _not_a_sitemap(root.getroottree().getroot(), base_url=base_url)
        prefix = f"{{{name.namespace}}}" if name.namespace else ""
        index = name.localname == "sitemapindex"
        return cls(
            index=index, entry=prefix + ("sitemap" if index else "url"), loc=prefix + "loc", lastmod=prefix + "lastmod"
        )


def _not_a_sitemap(root: etree._Element, *, base_url: str) -> SitemapError:
    return SitemapError(
        f"sitemap {base_url} is not a sitemap: its root element is <{etree.QName(root).localname}>, "
        "not <urlset> or <sitemapindex>"
    )


def _loc(text: str | None, *, base_url: str) -> str | None:
    # Not an empty one: resolved, it would name the sitemap itself.
    return absolute_url(text, base=base_url) if text and not text.isspace() else None
