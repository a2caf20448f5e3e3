"""Turns a fetched body into text: charset decoding, then trafilatura markdown and metadata for HTML; a PDF's
or a Word document's markdown from its own parser.

It runs in worker processes, so it takes and returns plain picklable values.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import re
import unicodedata
from dataclasses import replace

import trafilatura
from lxml.html import HtmlElement

from pipelines_dagster.app_db.text import storable
from pipelines_dagster.core.crawl.extract.extracted import DOCUMENT_TYPES, HTML_TYPES, PDF, Extracted
from pipelines_dagster.core.crawl.extract.links import MAX_LINKS_PER_PAGE, PageLinks, page_links

METADATA_FIELDS = ("title", "description", "author", "date", "language")

_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
# The HTML standard has parsers look for <meta charset> in the first 1024 bytes only.
_META_CHARSET_WINDOW = 1024
_BLANK_RUN = re.compile(r"\n{3,}")


def extract_page(body: bytes, *, media_type: str, charset: str | None, url: str, links: bool = False) -> Extracted:
    """Text and metadata of a body of `media_type` (HTML, XHTML, plain text, PDF or DOCX) fetched from `url`;
    with `links`, also an HTML page's links and canonical URL, from the same parse. A document that cannot
    be read raises DocumentError saying why."""
    if media_type in DOCUMENT_TYPES:
        return _document(body, media_type=media_type)
    # Stored text from the start: the content hashed and compared with the last crawl is then the
    # text the databases keep, so a page differing only by NUL bytes is the same page.
    text = storable(decode_body(body, charset=charset, html=media_type in HTML_TYPES))
    if media_type not in HTML_TYPES:
        return _extracted(text, dict.fromkeys(METADATA_FIELDS))
    tree = trafilatura.load_html(text)
    if tree is None:
        return _extracted("", dict.fromkeys(METADATA_FIELDS))
    # Before trafilatura is handed the tree: page_links only reads it.
    found_links = page_links(tree, page_url=url) if links else PageLinks(links=[], canonical=None)
    _drop_links_past_cap(tree)
    # Not `extensive`: scanning the whole text for dates would cost several times the extraction itself.
    found = trafilatura.extract_metadata(tree, default_url=url, extensive=False)
    metadata = {name: getattr(found, name) or None for name in METADATA_FIELDS}
    # trafilatura fills `language` only when filtering by language; the page's own declaration serves.
    metadata["language"] = metadata["language"] or _declared_language(tree)
    markdown = trafilatura.extract(tree, url=url, output_format="markdown", include_tables=True)
    extracted = _extracted(markdown or "", metadata)
    return replace(extracted, links=tuple(found_links.links), canonical=found_links.canonical)


def _document(body: bytes, *, media_type: str) -> Extracted:
    # Imported at the first document, not as a worker starts: most crawls have none, and every crawl's first
    # page waits for its worker's start.
    if media_type == PDF:
        from pipelines_dagster.core.crawl.extract.pdf import pdf_markdown as parse
    else:
        from pipelines_dagster.core.crawl.extract.docx import docx_markdown as parse
    markdown, metadata = parse(body)
    return _extracted(storable(markdown), {name: metadata.get(name) for name in METADATA_FIELDS})


def _drop_links_past_cap(tree: HtmlElement) -> None:
    """Remove the anchors after the first MAX_LINKS_PER_PAGE (their text too; what follows them stays).

    trafilatura's cost grows with the elements it weighs (link density, per node): a page of 240,000
    links took 14 s and 700 MB to extract. Past the cap a page is a link farm or a generated index, and
    the text its extra anchors carry is their labels, which the KB does not need.
    """
    for anchor in list(itertools.islice(tree.iter("a"), MAX_LINKS_PER_PAGE, None)):
        anchor.drop_tree()


def decode_body(body: bytes, *, charset: str | None, html: bool) -> str:
    """`body` as text: a byte-order mark wins, then the declared charset, then (for HTML) a
    <meta> charset, then UTF-8. Bytes invalid in the chosen encoding become U+FFFD."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return body.decode(encoding, errors="replace")
    candidates = [charset]
    if html and (match := _META_CHARSET.search(body[:_META_CHARSET_WINDOW])):
        candidates.append(match.group(1).decode("ascii"))
    for candidate in candidates:
        if candidate:
            try:
                return body.decode(candidate, errors="replace")
            except LookupError:
                continue  # a charset name Python does not know, or not a text encoding
    return body.decode("utf-8", errors="replace")


def normalize_content(text: str) -> str:
    """The form content is hashed in: NFC, LF line ends, no trailing blanks, at most one blank line."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUN.sub("\n\n", text).strip()


def _extracted(content: str, metadata: dict[str, str | None]) -> Extracted:
    normalized = normalize_content(content)
    digest = hashlib.sha256(normalized.encode("utf-8")).hexdigest() if normalized else None
    return Extracted(content=content, content_hash=digest, metadata=metadata)


def _declared_language(tree: HtmlElement) -> str | None:
    root = tree.getroottree().getroot()
    declared = root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang") or ""
    return declared.strip() or None
