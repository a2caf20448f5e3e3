"""A Word document (DOCX) as markdown, in an extraction worker, through mammoth; and the guard that opens its zip
first, so a zip bomb dressed as a document is refused before mammoth reads a byte of it.

The guard refuses a zip of too many entries or whose entries declare too many bytes in all, before inflating any;
then inflates every entry, each read no further than the size it declares (zipfile stops there too, and a CRC
that does not match, as when a header lies, refuses the file), and refuses XML that declares a DTD (Word never
writes one; entity tricks need one). Only then is mammoth handed the file: what it reads again is what was
measured. Pictures are left out of the text, so their bytes are not decoded again.
"""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree

import mammoth

from pipelines_dagster.core.crawl.extract.extracted import DocumentError
from pipelines_dagster.core.crawl.extract.word_html import markdown_of

# A Word document has tens of entries, a large one with many pictures a few thousand.
MAX_ENTRIES = 5_000
# Inflated bytes of every entry together: the crawler's cap on the file is 50 MiB, and a document's XML
# inflates some tenfold; past this a file is built to exhaust, not to read.
MAX_INFLATED_BYTES = 256 * 1024 * 1024
_MAIN_PART = "word/document.xml"
# How Word stores a document's parts; zipfile would also inflate bzip2 and LZMA, which no Word writes.
_WORD_COMPRESSION = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
_CORE_PROPERTIES = "docProps/core.xml"
_DTD_MARKS = tuple("<!DOCTYPE".encode(encoding) for encoding in ("utf-8", "utf-16-le", "utf-16-be"))
_CORE_FIELDS = {
    "title": "{http://purl.org/dc/elements/1.1/}title",
    "description": "{http://purl.org/dc/elements/1.1/}description",
    "author": "{http://purl.org/dc/elements/1.1/}creator",
    "date": "{http://purl.org/dc/terms/}created",
    "language": "{http://purl.org/dc/elements/1.1/}language",
}


def docx_markdown(body: bytes) -> tuple[str, dict[str, str | None]]:
    """The document's text as markdown (headings, lists, tables, links), and its title, author, date and
    language from its properties. Raises DocumentError saying why when it is not a safe, readable DOCX."""
    properties = checked_zip(body)
    try:
        # Never a file a document links to outside itself: the worker's disk is not the document's.
        result = mammoth.convert_to_html(io.BytesIO(body), convert_image=_no_picture, external_file_access=False)
    except MemoryError:
        raise DocumentError("the DOCX needs more memory to read than an extraction worker may use") from None
    except Exception as exc:  # mammoth raises many kinds on a malformed document; each is this URL's reason
        raise DocumentError(f"the DOCX could not be read: {exc or type(exc).__name__}") from None
    return markdown_of(result.value), _properties(properties)


def checked_zip(body: bytes) -> bytes | None:
    """Run the guard over a DOCX's zip; its core properties part (docProps/core.xml) when it has one.
    DocumentError saying what failed."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DocumentError(f"the DOCX is not a readable zip file ({exc})") from None
    with archive:
        entries = archive.infolist()
        if len(entries) > MAX_ENTRIES:
            raise DocumentError(f"the DOCX's zip holds {len(entries)} entries, more than {MAX_ENTRIES}; not read")
        declared = sum(entry.file_size for entry in entries)
        if declared > MAX_INFLATED_BYTES:
            raise DocumentError(
                f"the DOCX's zip declares {declared} bytes uncompressed, more than {MAX_INFLATED_BYTES}: "
                "a zip bomb, or far larger than a document; not read"
            )
        if _MAIN_PART not in archive.NameToInfo:
            raise DocumentError(f"the file is a zip but not a Word document: it has no {_MAIN_PART}")
        properties = None
        for entry in entries:
            data = _inflated(archive, entry)
            if entry.filename.endswith((".xml", ".rels")) and any(mark in data for mark in _DTD_MARKS):
                raise DocumentError(f"the DOCX's part {entry.filename} declares a DTD, which Word never writes")
            if entry.filename == _CORE_PROPERTIES:
                properties = data
        return properties


def _inflated(archive: zipfile.ZipFile, entry: zipfile.ZipInfo) -> bytes:
    """An entry's bytes, inflated no further than the size it declares (and its CRC checked there): a whole-entry
    read would inflate each compressed chunk whole first, a lying header's bomb with it."""
    if entry.compress_type not in _WORD_COMPRESSION:
        raise DocumentError(
            f"the DOCX's entry {entry.filename} is compressed with method {entry.compress_type}, which Word never "
            "uses (only stored or deflated); not read"
        )
    try:
        with archive.open(entry) as member:
            return member.read(entry.file_size)
    except (zipfile.BadZipFile, RuntimeError, ValueError, OSError, EOFError) as exc:
        raise DocumentError(
            f"the DOCX's entry {entry.filename} is damaged or not what its header says ({exc}); not read"
        ) from None


def _no_picture(image: object) -> list[object]:
    """A picture's place in the text: none (the KB holds text, and mammoth would inline its bytes)."""
    return []


def _properties(core: bytes | None) -> dict[str, str | None]:
    found: dict[str, str | None] = dict.fromkeys(_CORE_FIELDS)
    if core is None:
        return found
    try:
        root = ElementTree.fromstring(core)
    except ElementTree.ParseError:
        return found  # the properties are a nicety: a document without readable ones still has its text
    for name, tag in _CORE_FIELDS.items():
        text = " ".join((root.findtext(tag) or "").split())
        found[name] = text or None
    return found
