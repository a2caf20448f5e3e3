"""A response body read to its cap: decoded (Content-Encoding) piece by piece with bounded output, so a
caller that stops reading at its size cap never holds more than one piece past it.

httpx inflates each network chunk whole before handing it over, which lets one gzip bomb cost
hundreds of MB before any cap is checked; the crawler reads raw chunks and decodes them here.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import httpx

from pipelines_dagster.core.crawl.types import FetchFailed

# What the crawler asks servers for: the codings it can inflate with a bound (brotli is not a
# dependency, so `br` is neither advertised nor accepted).
ACCEPT_ENCODING = "gzip, deflate"
# The most decoded bytes one decompress call may return: the memory a decoder may hold beyond
# what its caller keeps.
PIECE_BYTES = 64 * 1024
# Codings one response may stack ("gzip, gzip"): each costs a zlib state (~40 KiB), so a header
# listing thousands of them is refused rather than honoured.
MAX_CODINGS = 3
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS
# A redirect or error body longer than this is not read: its connection is closed instead.
_DRAIN_LIMIT = 64 * 1024


class DecodingError(ValueError):
    """A body that cannot be decoded; the message says why, for the URL's outcome."""


class BodyDecoder:
    """Decodes a body sent with the codings of its Content-Encoding header, applied in order.

    `feed` each raw chunk and `finish` at the end; both yield decoded pieces of at most
    PIECE_BYTES, lazily, so the input is only inflated as far as the caller reads.
    """

    def __init__(self, content_encoding: str | None) -> None:
        codings = [
            coding
            for coding in (part.strip().lower() for part in (content_encoding or "").split(","))
            if coding and coding != "identity"
        ]
        if len(codings) > MAX_CODINGS:
            raise DecodingError(
                f"the body is encoded {len(codings)} times ({content_encoding!r}); at most {MAX_CODINGS} are decoded"
            )
        # The last coding applied is the first to undo.
        self._stages = [_Inflater(coding) for coding in reversed(codings)]

    def feed(self, data: bytes) -> Iterator[bytes]:
        return self._through(0, data)

    def finish(self) -> Iterator[bytes]:
        """What is left once the raw body has ended (a truncated stream is kept as far as it goes)."""
        return self._through(0, b"", final=True)

    def _through(self, stage: int, data: bytes, *, final: bool = False) -> Iterator[bytes]:
        if stage == len(self._stages):
            if data:
                yield data
            return
        for piece in self._stages[stage].inflate(data):
            yield from self._through(stage + 1, piece)
        if final:
            yield from self._through(stage + 1, b"", final=True)


class _Inflater:
    """One gzip or deflate layer (zlib-wrapped, as RFC 9110 says, or raw, as some servers send)."""

    def __init__(self, coding: str) -> None:
        if coding not in {"gzip", "x-gzip", "deflate"}:
            raise DecodingError(f"unsupported content encoding {coding!r}; only gzip and deflate are decoded")
        self._deflate = coding == "deflate"
        # A deflate stream's kind is known from its first two bytes, which may come in two chunks.
        self._head = b""
        self._inflater = None if self._deflate else zlib.decompressobj(_GZIP_WBITS)

    def inflate(self, data: bytes) -> Iterator[bytes]:
        if self._inflater is None:
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head = self._head, b""
            self._inflater = zlib.decompressobj(zlib.MAX_WBITS if _zlib_wrapped(data) else _RAW_DEFLATE_WBITS)
        inflater = self._inflater
        try:
            # Until a call returns less than a full piece: zlib may still hold output for input it
            # has taken in whole (an unfinished back-reference), not only for its unconsumed tail.
            while not inflater.eof:
                piece = inflater.decompress(data, PIECE_BYTES)
                data = inflater.unconsumed_tail
                if piece:
                    yield piece
                if len(piece) < PIECE_BYTES and not data:
                    return
        except zlib.error as exc:
            raise DecodingError(f"the body could not be decoded: {exc}") from None


def _zlib_wrapped(head: bytes) -> bool:
    """Whether a deflate body starts with a zlib header (RFC 1950: method 8, a check multiple of 31)."""
    return head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0


@dataclass(frozen=True)
class BodyCap:
    """How much of a body is read: past `max_bytes` it is refused, or with `cut` kept to there. A `document`'s
    body (a PDF, a DOCX) is read only in one of the crawl's few document slots."""

    max_bytes: int
    cut: bool = False
    document: bool = False


class Body:
    """A body as its decoded pieces come, hashed, and held to its cap."""

    def __init__(self, cap: BodyCap) -> None:
        self.cap = cap
        self.data = bytearray()
        self.digest = hashlib.sha256()
        self.truncated = False

    def add(self, pieces: Iterable[bytes]) -> bool:
        """Take pieces until the cap is passed; False once it was (with `cut`: read no more)."""
        for piece in pieces:
            room = self.cap.max_bytes - len(self.data)
            if len(piece) > room:
                if not self.cap.cut:
                    raise FetchFailed(f"body larger than {self.cap.max_bytes} bytes")
                piece, self.truncated = piece[:room], True
            self.data += piece
            self.digest.update(piece)
            if self.truncated:
                return False
        return True


async def drain(response: httpx.Response) -> None:
    """Read a short redirect or error body, so its connection can serve the next request."""
    seen = 0
    async for chunk in response.aiter_raw():
        seen += len(chunk)
        if seen > _DRAIN_LIMIT:
            return  # not worth reading: leaving it unread closes the connection instead
