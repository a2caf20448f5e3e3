"""PDF and DOCX files made on the spot, with known text: what tests and the PDF bench crawl and parse.

A PDF is built with pypdf (one Helvetica text object per page, an outline whose entries point at pages); a DOCX
is written as its zip by hand, with the parts mammoth reads. Hostile ones too: a scanned PDF (pages of an image
and no text), a malformed one, and a zip bomb dressed as a DOCX.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Sequence
from xml.sax.saxutils import escape

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject, NumberObject

_LINE_HEIGHT = 14


def _shown(text: str) -> bytes:
    """A content stream showing `text`, a line of it per line of the page."""
    escaped = (line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in text.split("\n"))
    lines = "".join(f"({line}) '\n" for line in escaped)
    return f"BT /F1 11 Tf {_LINE_HEIGHT} TL 72 740 Td\n{lines}ET".encode("latin-1")


def _stream(writer: PdfWriter, data: bytes, **entries: object) -> object:
    stream = DecodedStreamObject()
    stream.set_data(data)
    stream.update({NameObject(name): value for name, value in entries.items()})
    return writer._add_object(stream)


def _text_pages(writer: PdfWriter, contents: Sequence[bytes], *, deflate: bool = False) -> None:
    """Pages drawing `contents` (content streams), each with Helvetica as /F1."""
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for content in contents:
        page = writer.add_blank_page(612, 792)
        stream = DecodedStreamObject()
        stream.set_data(content)
        page[NameObject("/Contents")] = writer._add_object(stream.flate_encode() if deflate else stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )


def _written(writer: PdfWriter) -> bytes:
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_document(
    pages: Sequence[str], *, outline: Sequence[tuple[str, int, int]] = (), title: str | None = None
) -> bytes:
    """A PDF whose page n shows `pages[n]` (one line per line of it), and whose outline has (title, page index,
    level) entries in order; a level-2 entry is a child of the level-1 entry before it."""
    writer = PdfWriter()
    _text_pages(writer, [_shown(text) for text in pages])
    parents: dict[int, object] = {}
    for heading, page_index, level in outline:
        parents[level] = writer.add_outline_item(title=heading, page_number=page_index, parent=parents.get(level - 1))
    if title is not None:
        writer.add_metadata({"/Title": title})
    return _written(writer)


def inflating_pdf(megabytes: int) -> bytes:
    """A PDF of one page whose content stream is tens of KB deflated and `megabytes` MiB of text operators inflated:
    a few seconds of pypdf's time per 10 MiB."""
    writer = PdfWriter()
    operators = b"BT /F1 1 Tf 0 0 Td (a) Tj ET\n"
    _text_pages(writer, [operators * (megabytes * 1024 * 1024 // len(operators))], deflate=True)
    return _written(writer)


def scanned_pdf(pages: int = 2) -> bytes:
    """A PDF whose pages each show a (grey, 8x8) picture and carry no text: what a scanner makes."""
    writer = PdfWriter()
    for _ in range(pages):
        page = writer.add_blank_page(612, 792)
        image = _stream(
            writer,
            bytes(range(64)),
            **{
                "/Type": NameObject("/XObject"),
                "/Subtype": NameObject("/Image"),
                "/Width": NumberObject(8),
                "/Height": NumberObject(8),
                "/ColorSpace": NameObject("/DeviceGray"),
                "/BitsPerComponent": NumberObject(8),
            },
        )
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/XObject"): DictionaryObject({NameObject("/Im0"): image})}
        )
        page[NameObject("/Contents")] = _stream(writer, b"q 540 0 0 720 36 36 cm /Im0 Do Q")
    return _written(writer)


MALFORMED_PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF garbage"
"""Starts as a PDF does, and has no page tree, no cross-reference table and no pages."""

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    '<Override PartName="/word/styles.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/>'
    "</Types>"
)
_PACKAGE_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Target="word/document.xml" '
    'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/>'
    "</Relationships>"
)
_DOCUMENT_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Target="styles.xml" '
    'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles"/>'
    "</Relationships>"
)
_STYLES = (
    f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:styles xmlns:w="{_W}">'
    + "".join(
        f'<w:style w:type="paragraph" w:styleId="Heading{level}"><w:name w:val="heading {level}"/></w:style>'
        for level in (1, 2)
    )
    + "</w:styles>"
)


def docx_document(paragraphs: Sequence[tuple[str, str]], *, title: str | None = None) -> bytes:
    """A DOCX of (style, text) paragraphs, style "" for body text or "Heading1"/"Heading2"."""
    body = "".join(
        "<w:p>"
        + (f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else "")
        + f'<w:r><w:t xml:space="preserve">{escape(text)}</w:t></w:r></w:p>'
        for style, text in paragraphs
    )
    parts = {
        "[Content_Types].xml": _CONTENT_TYPES,
        "_rels/.rels": _PACKAGE_RELS,
        "word/_rels/document.xml.rels": _DOCUMENT_RELS,
        "word/styles.xml": _STYLES,
        "word/document.xml": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            f'<w:document xmlns:w="{_W}"><w:body>{body}</w:body></w:document>'
        ),
    }
    if title is not None:
        parts["docProps/core.xml"] = (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
            '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties"'
            ' xmlns:dc="http://purl.org/dc/elements/1.1/">'
            f"<dc:title>{escape(title)}</dc:title></cp:coreProperties>"
        )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in parts.items():
            archive.writestr(name, text)
    return out.getvalue()


def docx_bomb(*, inflated: int = 4 * 1024**3, declared: int | None = None) -> bytes:
    """A DOCX's zip whose word/document.xml inflates to `inflated` bytes of zeros (4 GiB from 4 MiB), its headers
    declaring `declared` bytes (default: the truth; less makes a lying header).

    The entry is written already deflated, one full-flushed block of a MiB of zeros repeated (each such block
    stands alone, so repeats are a valid stream): nothing inflates it to build it. Its CRC is not computed (0),
    since a guard must refuse it long before the end, where a CRC is checked.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    piece = 1024 * 1024
    block = compressor.compress(bytes(piece)) + compressor.flush(zlib.Z_FULL_FLUSH)
    deflated = block * (inflated // piece) + compressor.flush()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _PACKAGE_RELS)
        entry = zipfile.ZipInfo("word/document.xml", date_time=(2024, 1, 1, 0, 0, 0))
        entry.compress_type = zipfile.ZIP_DEFLATED
        entry.file_size = inflated if declared is None else declared
        entry.compress_size = len(deflated)
        entry.CRC = 0
        assert archive.fp is not None
        entry.header_offset = archive.fp.tell()
        archive.fp.write(entry.FileHeader())
        archive.fp.write(deflated)
        # What ZipFile.writestr does after a member, so close() writes this entry into the central directory.
        archive.start_dir = archive.fp.tell()
        archive.filelist.append(entry)
        archive.NameToInfo[entry.filename] = entry
    return out.getvalue()
