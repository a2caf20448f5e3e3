"""A PDF's text layer as markdown, in an extraction worker: each page's text in order, the document's outline
(its bookmarks) placed as headings at the start of the pages they point to.

pypdf reads the file as it is: a scanned PDF, whose pages are pictures, has no text to give and fails saying
so, since the crawler does no OCR. A malformed file fails with pypdf's reason. What a hostile file costs is
bounded outside: its size by the crawler's cap, its time by the worker's budget, its memory by the worker's
address-space limit (`worker_process`).
"""

from __future__ import annotations

import io
import itertools
import logging
from collections.abc import Iterator
from typing import Any

from pypdf import PdfReader

from pipelines_dagster.core.crawl.extract.extracted import DocumentError

# pypdf warns of every flaw it reads past (a wrong xref offset, a stray byte); a worker's stderr is its run's log,
# which would fill with them on a site of sloppy PDFs. What fails a document is its URL's outcome.
logging.getLogger("pypdf").setLevel(logging.ERROR)
# Markdown has six heading levels; deeper bookmarks are sixth-level headings.
_MAX_HEADING_LEVEL = 6
# Bookmarks placed from one outline: a real document has hundreds at most; each costs a page lookup.
_MAX_OUTLINE_ITEMS = 10_000


def pdf_markdown(body: bytes) -> tuple[str, dict[str, str | None]]:
    """The PDF's text as markdown, and its title, author, date and language where it declares them.

    Raises DocumentError saying why when the file cannot be read, is encrypted, or has no text layer.
    """
    try:
        reader = PdfReader(io.BytesIO(body))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError("the PDF is encrypted with a password; it cannot be read")
        headings = _headings(reader)
        pages = [page.extract_text() or "" for page in reader.pages]
        metadata = _metadata(reader)
    except DocumentError:
        raise
    except MemoryError:
        raise DocumentError("the PDF needs more memory to read than an extraction worker may use") from None
    except Exception as exc:  # pypdf raises many kinds on a malformed file; each is this URL's reason
        raise DocumentError(f"the PDF could not be read: {exc or type(exc).__name__}") from None
    if not any(text.strip() for text in pages):
        raise DocumentError(
            f"the PDF has no text layer ({len(pages)} {'page' if len(pages) == 1 else 'pages'} without text, a "
            "scanned document?); OCR is not done, so it has no text for the knowledge base"
        )
    parts: list[str] = []
    for number, text in enumerate(pages):
        parts += [f"{'#' * level} {title}" for level, title in headings.get(number, ())]
        parts.append(text.strip())
    return "\n\n".join(part for part in parts if part), metadata


def _headings(reader: PdfReader) -> dict[int, list[tuple[int, str]]]:
    """The outline's entries by the page (index) they point to, each as (heading level, title), in order."""
    headings: dict[int, list[tuple[int, str]]] = {}
    for level, item in itertools.islice(_outline(reader.outline, level=1), _MAX_OUTLINE_ITEMS):
        title = " ".join(str(item.title or "").split())
        page = reader.get_destination_page_number(item)
        if title and page is not None and page >= 0:
            headings.setdefault(page, []).append((min(level, _MAX_HEADING_LEVEL), title))
    return headings


def _outline(items: list[Any], *, level: int) -> Iterator[tuple[int, Any]]:
    """The outline's entries depth first; a nested list holds the children of the entry before it."""
    for item in items:
        if isinstance(item, list):
            yield from _outline(item, level=level + 1)
        else:
            yield level, item


def _metadata(reader: PdfReader) -> dict[str, str | None]:
    info = reader.metadata
    date = info.creation_date if info is not None else None
    language = reader.root_object.get("/Lang")
    return {
        "title": _text(info.title if info is not None else None),
        "description": _text(info.subject if info is not None else None),
        "author": _text(info.author if info is not None else None),
        "date": date.date().isoformat() if date is not None else None,
        "language": _text(language),
    }


def _text(value: object) -> str | None:
    if value is None:
        return None
    if hasattr(value, "get_object"):  # an indirect reference, as a catalog entry may be
        value = value.get_object()
    return " ".join(str(value).split()) or None
