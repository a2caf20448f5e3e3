"""What the crawler and the extraction workers share: the media types extracted, what kind of page each
is, and the result.

Apart from `extract.page`, so the crawling process never imports trafilatura, lxml, pypdf or mammoth: only
the worker processes extract, and every run process loads the crawler's modules with the code location.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PLAIN_TEXT = "text/plain"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
DOCUMENT_TYPES = frozenset({PDF, DOCX})
PAGE_TYPES = HTML_TYPES | {PLAIN_TEXT} | DOCUMENT_TYPES
# What servers send a file as when they do not say what it is: a document is taken from it only when the
# URL names one (.pdf, .docx) and the body starts as that kind of file does.
UNTYPED = frozenset({"application/octet-stream", "binary/octet-stream", "application/x-download"})
_SUFFIXES = {".pdf": PDF, ".docx": DOCX}
# The PDF header (ISO 32000 lets readers find it in the first 1024 bytes), and a zip's first local header.
_PDF_MAGIC = b"%PDF-"
_PDF_MAGIC_WINDOW = 1024
_ZIP_MAGIC = b"PK\x03\x04"

PageKind = Literal["html", "text", "pdf", "docx"]
PAGE_KINDS: tuple[PageKind, ...] = ("html", "text", "pdf", "docx")
DOCUMENT_KINDS: frozenset[PageKind] = frozenset({"pdf", "docx"})
_KINDS: dict[str, PageKind] = {**dict.fromkeys(HTML_TYPES, "html"), PLAIN_TEXT: "text", PDF: "pdf", DOCX: "docx"}


def page_kind(media_type: str) -> PageKind | None:
    """What kind of page a body of `media_type` is; None for a type the crawler does not extract."""
    return _KINDS.get(media_type)


def named_document(url: str) -> str | None:
    """The document type a URL's path names by its suffix (`/manual.pdf`), if any."""
    path = urlsplit(url).path.lower()
    return next((media_type for suffix, media_type in _SUFFIXES.items() if path.endswith(suffix)), None)


def sniffed_document(body: bytes, *, url: str) -> str | None:
    """The document type of an untyped body: the one its URL names, when the body starts as such a file does
    (the zip of a DOCX is checked for its Word part in the worker, which alone opens it)."""
    named = named_document(url)
    if named == PDF and _PDF_MAGIC in body[:_PDF_MAGIC_WINDOW]:
        return PDF
    if named == DOCX and body.startswith(_ZIP_MAGIC):
        return DOCX
    return None


class DocumentError(ValueError):
    """A document that cannot be turned into text; the message says why, for the URL's outcome."""


@dataclass(frozen=True)
class Extracted:
    """A page's text (markdown for HTML and documents), the hash of its normalized form, and its metadata.

    `content_hash` is None when the page has no text. `links` (absolute, normalized, in document
    order) and `canonical` are read from the same parse, for a site crawl that asks for them.
    """

    content: str
    content_hash: str | None
    metadata: dict[str, str | None]
    links: tuple[str, ...] = field(default=())
    canonical: str | None = None
    rendered: bool = False
    """Extracted from the page as a browser rendered it, which took `render_seconds`."""
    render_seconds: float = 0.0
