"""Bounded decompression: compressed bodies are inflated piece by piece under the body cap, so a gzip
bomb fails its URL without costing its inflated size, and normal compressed pages crawl as before."""

from __future__ import annotations

import gzip
import hashlib
import tracemalloc
import zlib
from collections.abc import Iterator

import pytest

from pipelines_dagster.core.crawl.body import PIECE_BYTES, BodyDecoder, DecodingError
from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.types import PreviousFetch
from tests.core.crawl.test_crawler import ARTICLE, BASE, by_path
from tests.support.web import Reply, WebServer, html_document

pytestmark = pytest.mark.usefixtures("loopback_only")

BOMB_BYTES = 256 * 1024 * 1024
HTML = html_document("Compressed", ARTICLE).encode()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """BOMB_BYTES of zeros gzipped (about 250 KiB): each 64 KiB of it inflates to about 64 MiB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    return b"".join([compressor.compress(block) for _ in range(BOMB_BYTES // len(block))] + [compressor.flush()])


@pytest.fixture(scope="module")
def crawler() -> Iterator[Crawler]:
    with Crawler(BASE) as shared:
        yield shared


def deflated(body: bytes, *, wbits: int) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return compressor.compress(body) + compressor.flush()


def test_a_gzip_bomb_fails_on_the_size_cap_without_being_inflated(
    web: WebServer, crawler: Crawler, bomb: bytes
) -> None:
    web.route("/bomb", Reply(body=bomb, headers={"Content-Encoding": "gzip"}, chunked=True))
    web.route("/fine", Reply(body=gzip.compress(HTML), headers={"Content-Encoding": "gzip"}))
    crawler.crawl_all([web.url("/fine")])  # workers and imports warmed up outside the measurement
    tracemalloc.start()
    try:
        outcomes = by_path(crawler.crawl_all([web.url("/bomb"), web.url("/fine")]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (outcomes["bomb"].status, outcomes["bomb"].error) == (
        "failed",
        f"body larger than {BASE.max_body_bytes} bytes",
    )
    assert outcomes["fine"].status == "success"
    # httpx would inflate a whole network chunk first: about 64 MiB of it at once.
    assert peak < 8 * 1024 * 1024, peak


def test_the_decoder_never_yields_more_than_a_piece_however_much_a_chunk_inflates(bomb: bytes) -> None:
    decoder = BodyDecoder("gzip")
    pieces = decoder.feed(bomb[: 64 * 1024])
    sizes = [len(next(pieces)) for _ in range(100)]
    assert max(sizes) == PIECE_BYTES
    total = sum(sizes) + sum(len(piece) for piece in pieces) + sum(len(piece) for piece in decoder.finish())
    assert total > 32 * 1024 * 1024  # the chunk was a bomb: the decoder only inflated it as it was read


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(HTML, mtime=0)),
        ("x-gzip", gzip.compress(HTML, mtime=0)),
        ("deflate", deflated(HTML, wbits=zlib.MAX_WBITS)),  # RFC 9110's deflate: zlib-wrapped
        ("deflate", deflated(HTML, wbits=-zlib.MAX_WBITS)),  # what some servers send: raw deflate
        ("gzip, gzip", gzip.compress(gzip.compress(HTML, mtime=0), mtime=0)),
        ("deflate, Gzip", gzip.compress(deflated(HTML, wbits=zlib.MAX_WBITS), mtime=0)),
        ("identity", HTML),
    ],
)
def test_compressed_pages_are_decoded_extracted_and_hashed_as_sent(
    web: WebServer, crawler: Crawler, encoding: str, body: bytes
) -> None:
    web.route("/page", Reply(body=body, headers={"Content-Encoding": encoding}, chunked=True))
    [outcome] = crawler.crawl_all([web.url("/page")])
    assert outcome.status == "success", outcome.error
    assert outcome.metadata["title"] == "Compressed" and "Each page is fetched once" in outcome.content
    assert outcome.raw_hash == hashlib.sha256(HTML).hexdigest()
    assert web.requests[-1].headers["accept-encoding"] == "gzip, deflate"


def test_a_compressed_page_that_did_not_change_is_unchanged(web: WebServer, crawler: Crawler) -> None:
    web.route("/same", Reply(body=gzip.compress(HTML), headers={"Content-Encoding": "gzip"}))
    [first] = crawler.crawl_all([web.url("/same")])
    previous = PreviousFetch(raw_hash=first.raw_hash, content_hash=first.content_hash)
    [again] = crawler.crawl_all([web.url("/same")], previous={web.url("/same"): previous})
    assert (again.status, again.unchanged, again.content_hash) == ("success", True, first.content_hash)


def test_a_compressed_body_that_fits_decoded_is_read_whole(web: WebServer, crawler: Crawler) -> None:
    fits = b"<html><body><p>ok</p></body></html>".ljust(BASE.max_body_bytes)
    over = fits + b" "
    web.route("/fits", Reply(body=gzip.compress(fits), headers={"Content-Encoding": "gzip"}))
    web.route("/over", Reply(body=gzip.compress(over), headers={"Content-Encoding": "gzip"}))
    outcomes = by_path(crawler.crawl_all([web.url("/fits"), web.url("/over")]))
    assert outcomes["fits"].status == "success"
    assert outcomes["over"].error == f"body larger than {BASE.max_body_bytes} bytes"


def test_encodings_that_cannot_be_decoded_fail_their_url_with_the_reason(web: WebServer, crawler: Crawler) -> None:
    web.route("/br", Reply(body=b"\x1b\x03\x00", headers={"Content-Encoding": "br"}))
    web.route("/stacked", Reply(body=HTML, headers={"Content-Encoding": "gzip, gzip, gzip, gzip"}))
    web.route("/corrupt", Reply(body=HTML, headers={"Content-Encoding": "gzip"}))
    outcomes = by_path(crawler.crawl_all([web.url("/br"), web.url("/stacked"), web.url("/corrupt")]))
    assert outcomes["br"].error == "unsupported content encoding 'br'; only gzip and deflate are decoded"
    assert outcomes["stacked"].error == "the body is encoded 4 times ('gzip, gzip, gzip, gzip'); at most 3 are decoded"
    assert (outcomes["corrupt"].error or "").startswith("the body could not be decoded: ")
    assert {outcome.status for outcome in outcomes.values()} == {"failed"}


def test_a_decoder_refuses_what_it_cannot_decode() -> None:
    with pytest.raises(DecodingError, match="unsupported content encoding 'zstd'"):
        BodyDecoder("zstd")
    decoder = BodyDecoder("deflate")
    with pytest.raises(DecodingError, match="could not be decoded"):
        list(decoder.feed(b"\x78\x9c" + b"\xff" * 16))


def test_a_truncated_stream_keeps_what_it_has() -> None:
    decoder = BodyDecoder("gzip")
    # Without its trailer, as httpx read such a body too: lenient, like browsers.
    assert b"".join([*decoder.feed(gzip.compress(HTML)[:-8]), *decoder.finish()]) == HTML


def test_a_deflate_head_split_across_chunks_is_recognized() -> None:
    body = deflated(HTML, wbits=zlib.MAX_WBITS)
    decoder = BodyDecoder("deflate")
    assert b"".join([*decoder.feed(body[:1]), *decoder.feed(body[1:]), *decoder.finish()]) == HTML
