"""Sitemaps: url sets and indexes, gzip, lastmod forms, namespaces, malformed and hostile XML, the
URL and byte caps, flat memory for a 50,000-URL sitemap, and where a crawl looks for them."""

from __future__ import annotations

import codecs
import ctypes
import gzip
import json
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipelines_dagster.core.crawl.site.sitemaps import (
    Sitemap,
    SitemapError,
    SitemapUrl,
    parse_sitemap,
    parse_w3c_datetime,
    sitemap_candidates,
)

BASE = "https://www.example.com/sitemap.xml"
REPO = Path(__file__).resolve().parents[4]
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
MIB = 1024 * 1024


def parse(body: bytes | str, *, max_urls: int = 50_000, max_bytes: int = 50 * MIB) -> Sitemap:
    data = body.encode("utf-8") if isinstance(body, str) else body
    return parse_sitemap(data, base_url=BASE, max_urls=max_urls, max_bytes=max_bytes)


URLSET = f"""<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS} xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"
        xmlns:xhtml="http://www.w3.org/1999/xhtml">
  <url>
    <loc>
      https://www.example.com/a
    </loc>
    <lastmod>2024-05-06</lastmod>
    <changefreq>weekly</changefreq>
    <image:image><image:loc>https://cdn.example.com/a.png</image:loc></image:image>
    <xhtml:link rel="alternate" hreflang="sv" href="https://www.example.com/sv/a"/>
  </url>
  <!-- a comment between entries -->
  <url><loc>/b?x=1#part</loc><lastmod>2024-05-06T07:08:09+02:00</lastmod></url>
  <url><loc>HTTPS://WWW.Example.com:443/c/./d</loc><lastmod>not a date</lastmod></url>
  <url><loc>mailto:someone@example.com</loc></url>
  <url><loc>   </loc></url>
  <url><lastmod>2024-01-01</lastmod></url>
</urlset>
"""


def test_a_urlset_lists_its_pages_resolved_and_normalized_with_their_lastmod():
    sitemap = parse(URLSET)
    assert sitemap == Sitemap(
        urls=[
            SitemapUrl(loc="https://www.example.com/a", lastmod=datetime(2024, 5, 6, tzinfo=UTC)),
            SitemapUrl(loc="https://www.example.com/b?x=1", lastmod=datetime(2024, 5, 6, 5, 8, 9, tzinfo=UTC)),
            SitemapUrl(loc="https://www.example.com/c/d", lastmod=None),
        ],
        sitemaps=[],
        truncated=False,
    )


def test_an_index_lists_its_child_sitemaps():
    sitemap = parse(
        f"""<?xml version="1.0" encoding="UTF-8"?>
        <sitemapindex {NS}>
          <sitemap><loc>https://www.example.com/sitemap-posts.xml.gz</loc><lastmod>2024-05-06</lastmod></sitemap>
          <sitemap><loc> /sitemap-pages.xml </loc></sitemap>
          <sitemap><loc>javascript:void(0)</loc></sitemap>
        </sitemapindex>"""
    )
    assert sitemap == Sitemap(
        urls=[],
        sitemaps=["https://www.example.com/sitemap-posts.xml.gz", "https://www.example.com/sitemap-pages.xml"],
        truncated=False,
    )


@pytest.mark.parametrize(
    "root",
    [
        "<urlset>",  # no namespace
        '<urlset xmlns="http://www.google.com/schemas/sitemap/0.84">',  # the pre-sitemaps.org one
        '<sm:urlset xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9">',  # a prefixed one
    ],
)
def test_any_namespace_or_none_is_read(root):
    prefix = "sm:" if root.startswith("<sm:") else ""
    body = f"{root}<{prefix}url><{prefix}loc>https://www.example.com/x</{prefix}loc></{prefix}url></{prefix}urlset>"
    assert [url.loc for url in parse(body).urls] == ["https://www.example.com/x"]


def test_an_extensions_loc_is_not_taken_for_the_pages():
    body = f"""<urlset {NS} xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
      <url><image:image><image:loc>https://cdn.example.com/only-an-image.png</image:loc></image:image></url>
    </urlset>"""
    assert parse(body).urls == []


def test_gzip_is_recognized_by_its_magic_bytes_not_the_name():
    compressed = gzip.compress(URLSET.encode("utf-8"))
    assert parse_sitemap(compressed, base_url=BASE, max_urls=10, max_bytes=MIB) == parse(URLSET)
    # and a .gz name on a body that is not compressed (a server that decoded it) is read as it is
    assert parse_sitemap(URLSET.encode(), base_url=BASE + ".gz", max_urls=10, max_bytes=MIB).urls == parse(URLSET).urls


def test_the_declared_encoding_is_honoured_and_a_blank_line_before_the_declaration_tolerated():
    body = '\n\n<?xml version="1.0" encoding="ISO-8859-1"?>\n<urlset><url><loc>https://www.example.com/café</loc></url></urlset>'
    assert [url.loc for url in parse(body.encode("iso-8859-1")).urls] == ["https://www.example.com/caf%C3%A9"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024", datetime(2024, 1, 1, tzinfo=UTC)),
        ("2024-05", datetime(2024, 5, 1, tzinfo=UTC)),
        ("2024-05-06", datetime(2024, 5, 6, tzinfo=UTC)),
        ("2024-05-06T07:08Z", datetime(2024, 5, 6, 7, 8, tzinfo=UTC)),
        ("2024-05-06T07:08+01:00", datetime(2024, 5, 6, 6, 8, tzinfo=UTC)),
        ("2024-05-06T07:08:09Z", datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)),
        ("2024-05-06T07:08:09-05:30", datetime(2024, 5, 6, 12, 38, 9, tzinfo=UTC)),
        ("2024-05-06T07:08:09.25+00:00", datetime(2024, 5, 6, 7, 8, 9, 250_000, tzinfo=UTC)),
        ("2024-05-06T07:08:09.1234567Z", datetime(2024, 5, 6, 7, 8, 9, 123_456, tzinfo=UTC)),
        # leniencies real sitemaps need: no zone (UTC), a space for the T, a zone without its colon
        ("2024-05-06T07:08:09", datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)),
        (" 2024-05-06 07:08:09+0200 ", datetime(2024, 5, 6, 5, 8, 9, tzinfo=UTC)),
        ("yesterday", None),
        ("2024-13-01", None),
        ("2023-02-29", None),
        ("2024-05-06T25:00Z", None),
        ("06/05/2024", None),
        ("", None),
        (None, None),
    ],
)
def test_lastmod_forms(text, expected):
    parsed = parse_w3c_datetime(text)
    assert parsed == expected
    assert parsed is None or parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "is empty"),
        (b"  \n ", "is empty"),
        (b"<urlset><url><loc>https://e.com/</loc></urlset>", "is not well-formed XML: Opening and ending tag mismatch"),
        (b"<urlset><url><loc>https://e.com/</loc></url>", "is not well-formed XML"),
        (b"Not found\n", "is not a sitemap: neither XML nor a text file of URLs"),
        (b"<!doctype html><html><body>Not found</body></html>", "is not well-formed XML"),
        (b"<html><body><p>Not found</p></body></html>", "its root element is <html>, not <urlset> or <sitemapindex>"),
        (b"<feed><url><loc>https://e.com/</loc></url></feed>", "its root element is <feed>, not <urlset>"),
        (b"\x1f\x8b\x08\x00garbage", "is not a valid gzip file"),
        (gzip.compress(URLSET.encode(), mtime=0)[:-12], "is not a valid gzip file"),
    ],
)
def test_a_malformed_document_raises_a_sitemap_error_that_names_it(body, message):
    with pytest.raises(SitemapError, match=message) as raised:
        parse(body)
    assert str(raised.value).startswith(f"sitemap {BASE} ")


def test_a_text_sitemap_lists_one_url_a_line_gzipped_or_not():
    body = (
        "\ufeffhttps://www.example.com/a\r\n\n  HTTPS://WWW.EXAMPLE.COM:443/b/./c#x  \n"
        "/relative/is/not/a/full/url\nmailto:someone@example.com\nhttps://www.example.com/last"
    ).encode()
    expected = ["https://www.example.com/a", "https://www.example.com/b/c", "https://www.example.com/last"]
    for data in (body, gzip.compress(body)):
        sitemap = parse(data)
        assert [url.loc for url in sitemap.urls] == expected
        assert sitemap.sitemaps == [] and not sitemap.truncated


def test_an_xml_sitemap_after_a_byte_order_mark_is_read_as_xml():
    assert parse(codecs.BOM_UTF8 + URLSET.encode()) == parse(URLSET)
    assert parse(URLSET.replace('encoding="UTF-8"', 'encoding="UTF-16"').encode("utf-16")) == parse(URLSET)


def test_a_text_sitemap_keeps_to_max_urls_and_max_bytes():
    lines = [f"https://www.example.com/p{n}" for n in range(100)]
    body = "\n".join(lines).encode()
    capped = parse(body, max_urls=10)
    assert [url.loc for url in capped.urls] == lines[:10] and capped.truncated
    cut = parse(body, max_bytes=len(body) // 2)
    assert cut.truncated and 0 < len(cut.urls) < 100
    assert [url.loc for url in cut.urls] == lines[: len(cut.urls)]
    # A line without an end never builds up past a URL's length: 20 MiB without a newline is read in
    # about the time of its length, and yields nothing.
    started = time.monotonic()
    with pytest.raises(SitemapError, match="neither XML nor a text file of URLs"):
        parse(b"https://www.example.com/" + b"a" * (20 * MIB))
    assert time.monotonic() - started < 5


BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE urlset [\n <!ENTITY lol "lol">\n'
    + "".join(f' <!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n > 1 else "&lol;" * 10}">\n' for n in range(1, 10))
    + "]>\n<urlset><url><loc>https://www.example.com/&lol9;</loc></url></urlset>"
)
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE urlset [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<urlset><url><loc>https://www.example.com/&secret;</loc></url></urlset>"""
EXTERNAL_DTD = """<?xml version="1.0"?>
<!DOCTYPE urlset SYSTEM "http://127.0.0.1:9/sitemap.dtd">
<urlset><url><loc>https://www.example.com/</loc></url></urlset>"""


@pytest.mark.parametrize("body", [BILLION_LAUGHS, EXTERNAL_ENTITY, EXTERNAL_DTD])
def test_hostile_xml_is_refused_without_expanding_or_fetching_anything(body):
    started = time.monotonic()
    with pytest.raises(SitemapError) as raised:
        parse(body)
    assert time.monotonic() - started < 1
    assert "root:" not in str(raised.value)  # nothing of /etc/passwd


def test_entries_past_max_urls_are_left_and_the_sitemap_marked_truncated():
    body = f"<urlset {NS}>" + "".join(f"<url><loc>/p{n}</loc></url>" for n in range(5)) + "</urlset>"
    assert parse(body, max_urls=5) == parse(body) and not parse(body, max_urls=5).truncated
    capped = parse(body, max_urls=3)
    assert [url.loc for url in capped.urls] == [f"https://www.example.com/p{n}" for n in range(3)]
    assert capped.truncated
    index = "<sitemapindex>" + "".join(f"<sitemap><loc>/s{n}.xml</loc></sitemap>" for n in range(3)) + "</sitemapindex>"
    assert parse(index, max_urls=2).sitemaps == ["https://www.example.com/s0.xml", "https://www.example.com/s1.xml"]
    assert parse(index, max_urls=2).truncated


def test_a_long_document_without_a_sitemap_root_before_max_bytes_is_refused():
    body = b"<html><body>" + b"<p>filler</p>" * 10_000 + b"</body></html>"
    with pytest.raises(SitemapError, match="is not a sitemap: no <urlset> or <sitemapindex> in its first 1000 bytes"):
        parse(body, max_bytes=1000)


def test_a_document_longer_than_max_bytes_keeps_the_entries_before_the_cut():
    entries = "".join(f"<url><loc>https://www.example.com/p{n}</loc></url>" for n in range(1000))
    body = f"<urlset {NS}>{entries}</urlset>".encode()
    sitemap = parse(body, max_bytes=len(body) // 2)
    assert sitemap.truncated
    assert 0 < len(sitemap.urls) < 1000
    assert sitemap.urls == parse(body).urls[: len(sitemap.urls)]
    assert parse(body, max_bytes=len(body)) == parse(body)  # exactly at the cap: all of it


def _gzipped(chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """A gzip body made chunk by chunk, and its decompressed size: the whole document never exists."""
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    parts, size = [], 0
    for chunk in chunks:
        size += len(chunk)
        parts.append(compressor.compress(chunk))
    parts.append(compressor.flush())
    return b"".join(parts), size


def test_a_gzip_bomb_is_cut_off_at_max_bytes():
    def bomb() -> Iterator[bytes]:
        yield f"<urlset {NS}><url><loc>https://www.example.com/first</loc></url>".encode()
        blank = b" " * MIB
        for _ in range(128):  # 128 MiB of whitespace, in about 128 KiB
            yield blank

    body, size = _gzipped(bomb())
    assert size > 1000 * len(body)
    tracemalloc.start()
    try:
        started = time.monotonic()
        sitemap = parse(body, max_bytes=MIB)
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sitemap == Sitemap(urls=[SitemapUrl(loc="https://www.example.com/first")], sitemaps=[], truncated=True)
    assert peak < MIB, f"{peak} bytes at the peak"
    assert elapsed < 5


def _fifty_thousand_urls() -> Iterator[bytes]:
    yield f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>\n'.encode()
    for n in range(50_000):
        yield (
            f"<url>\n  <loc>https://www.example.com/articles/2024/an-article-slug-of-usual-length-{n}</loc>\n"
            "  <lastmod>2024-01-15T10:30:00+00:00</lastmod>\n  <changefreq>weekly</changefreq>\n"
            "  <priority>0.8</priority>\n</url>\n"
        ).encode()
    yield b"</urlset>\n"


def _memory() -> tuple[int, int]:
    """This process's resident memory and its peak since the last reset (Linux)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def measure_parse_memory() -> dict[str, object]:
    """In this process: parse the 50,000-URL sitemap with the resident peak reset before it."""
    body, size = _gzipped(_fifty_thousand_urls())
    libc = ctypes.CDLL(None)
    parse(gzip.compress(b"<urlset/>"))  # everything loaded before measuring
    libc.malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # the resident peak (VmHWM) back to the current size
    sitemap = parse(body)
    libc.malloc_trim(0)  # freed heap back to the system, so what stays resident is what is kept
    resident, resident_peak = _memory()
    last = sitemap.urls[-1]
    return {
        "size": size,
        "resident": resident,
        "peak": resident_peak,
        "urls": len(sitemap.urls),
        "truncated": sitemap.truncated,
        "last": [last.loc, last.lastmod.isoformat() if last.lastmod else None],
    }


def test_a_50000_url_sitemap_is_parsed_in_flat_memory():
    """Beyond what it returns, the parse needs a fraction of the document, however long.

    Measured on the resident peak of a process of its own, reset before the parse: a test worker's
    other threads would add their own. Not with tracemalloc: that sees Python's allocations only,
    not libxml2's (the tree a non-streaming parse builds, about ten times the document), and it
    slows this parse tenfold.
    """
    script = (
        "import json; from tests.core.crawl.site.test_sitemaps import measure_parse_memory as m; print(json.dumps(m()))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])

    assert (measured["urls"], measured["truncated"]) == (50_000, False)
    assert measured["last"] == [
        "https://www.example.com/articles/2024/an-article-slug-of-usual-length-49999",
        datetime(2024, 1, 15, 10, 30, tzinfo=UTC).isoformat(),
    ]
    size, grown = measured["size"], measured["peak"] - measured["resident"]
    # A quarter of the document: a tree of it would be ten times that, holding it whole one time that.
    assert grown < size // 4, f"document {size} bytes, resident peak {measured['peak']}, now {measured['resident']}"


@pytest.mark.parametrize(
    ("start_url", "robots", "candidates"),
    [
        ("https://www.example.com/docs/start", [], ["https://www.example.com/sitemap.xml"]),
        (
            "https://www.example.com/docs/",
            ["https://www.example.com/sitemap_index.xml", "https://cdn.example.com/sitemaps/all.xml.gz"],
            [
                "https://www.example.com/sitemap_index.xml",
                "https://cdn.example.com/sitemaps/all.xml.gz",
                "https://www.example.com/sitemap.xml",
            ],
        ),
        # robots.txt naming /sitemap.xml too (in another form), or twice: once each
        (
            "https://WWW.example.com:443/",
            ["https://www.example.com/sitemap.xml", "https://www.example.com:443/sitemap.xml#x"],
            ["https://www.example.com/sitemap.xml"],
        ),
        # a relative entry is read against robots.txt; what is not http(s) is left out
        (
            "http://127.0.0.1:8765/a/b",
            ["/maps/site.xml", "ftp://example.com/s.xml"],
            [
                "http://127.0.0.1:8765/maps/site.xml",
                "http://127.0.0.1:8765/sitemap.xml",
            ],
        ),
    ],
)
def test_sitemap_candidates(start_url, robots, candidates):
    assert sitemap_candidates(start_url, robots) == candidates
