"""Documents parsed and guarded, in process: a PDF's text layer and outline, a DOCX's markdown, the zip guard, the
types a crawl reads and how far, and a worker's address-space cap (read from the running worker)."""

from __future__ import annotations

import io
import time
import zipfile

import pytest
from pypdf import PdfWriter

from pipelines_dagster.core.crawl.extract.docx import MAX_ENTRIES, MAX_INFLATED_BYTES, docx_markdown
from pipelines_dagster.core.crawl.extract.extracted import DOCX, PDF, DocumentError, page_kind, sniffed_document
from pipelines_dagster.core.crawl.extract.page import extract_page
from pipelines_dagster.core.crawl.extract.pdf import pdf_markdown
from pipelines_dagster.core.crawl.extract.word_html import markdown_of
from pipelines_dagster.core.crawl.extract.worker_process import ADDRESS_SPACE_BYTES
from pipelines_dagster.core.crawl.extract.workers import ExtractionWorkers
from pipelines_dagster.core.crawl.page_types import page_cap, page_type
from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.crawl.types import CrawlerConfig, FetchFailed
from pipelines_dagster.core.run.report import CrawlReport
from tests.support.documents import MALFORMED_PDF, docx_bomb, docx_document, pdf_document, scanned_pdf

MiB = 1024 * 1024


def test_a_pdfs_outline_becomes_headings_at_the_start_of_the_pages_they_point_to():
    pdf = pdf_document(
        ["Overview of the pump.", "Mount it level.\nTighten the bolts.", "Check the seals (yearly)."],
        outline=[("Overview", 0, 1), ("Installation", 1, 1), ("Mounting", 1, 2), ("Care", 2, 1)],
        title="Pump  manual",
    )
    markdown, metadata = pdf_markdown(pdf)
    assert markdown == (
        "# Overview\n\nOverview of the pump.\n\n# Installation\n\n## Mounting\n\nMount it level.\nTighten the bolts."
        "\n\n# Care\n\nCheck the seals (yearly)."
    )
    assert metadata == {"title": "Pump manual", "description": None, "author": None, "date": None, "language": None}


def test_a_pdf_without_an_outline_is_its_pages_text():
    assert pdf_markdown(pdf_document(["One.", "Two."]))[0] == "One.\n\nTwo."


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (scanned_pdf(3), "the PDF has no text layer (3 pages without text, a scanned document?); OCR is not done"),
        (MALFORMED_PDF, "the PDF could not be read: "),
        (b"%PDF-1.4 and then nothing", "the PDF could not be read: "),
    ],
    ids=["scanned", "malformed", "truncated"],
)
def test_a_pdf_without_text_fails_saying_why(body, reason):
    with pytest.raises(DocumentError) as raised:
        pdf_markdown(body)
    assert str(raised.value).startswith(reason)


def test_an_encrypted_pdf_fails_saying_so():
    writer = PdfWriter(clone_from=io.BytesIO(pdf_document(["Secret."])))
    writer.encrypt("a password", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(DocumentError, match="encrypted with a password"):
        pdf_markdown(out.getvalue())


def test_a_looping_page_tree_fails_at_once():
    looping = pdf_document(["Loop."]).replace(b"/Kids [ 5 0 R ]", b"/Kids [ 5 0 R 2 0 R ]")
    assert looping != pdf_document(["Loop."])
    started = time.monotonic()
    with pytest.raises(DocumentError, match="cyclic"):
        pdf_markdown(looping)
    assert time.monotonic() - started < 1


def test_a_docx_becomes_markdown_with_its_headings_and_title():
    docx = docx_document(
        [("Heading1", "Wire format"), ("", "Every frame (v1.2) starts with its length."), ("Heading2", "Errors")],
        title="Protocol",
    )
    markdown, metadata = docx_markdown(docx)
    assert markdown == "# Wire format\n\nEvery frame (v1.2) starts with its length.\n\n## Errors"
    assert metadata["title"] == "Protocol" and metadata["author"] is None


def test_mammoths_html_becomes_markdown_with_lists_tables_and_links():
    html = (
        '<h2>Parts</h2><p>See <a href="https://example.com/s">the <strong>spec</strong></a>'
        '<sup><a href="#footnote-1" id="footnote-ref-1">[1]</a></sup>.</p>'
        "<ul><li>pump<ul><li>seal</li></ul></li><li><em>valve</em></li></ul><ol><li>first</li><li>second</li></ol>"
        "<table><tr><th><p>Part</p></th><th><p>Size</p></th></tr><tr><td><p>a|b</p></td><td><p>1</p><p>2</p></td></tr>"
        "</table><p>one<br />two</p>"
    )
    assert markdown_of(html) == (
        "## Parts\n\nSee [the **spec**](https://example.com/s)[1].\n\n- pump\n  - seal\n- *valve*\n\n1. first\n"
        "2. second\n\n| Part | Size |\n| --- | --- |\n| a\\|b | 1 2 |\n\none\ntwo"
    )
    assert markdown_of("") == ""


def _zip(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def test_a_zip_bomb_dressed_as_a_docx_is_refused_by_its_declared_size_before_anything_is_inflated():
    started = time.monotonic()
    with pytest.raises(DocumentError, match=f"declares 4294968149 bytes uncompressed, more than {MAX_INFLATED_BYTES}"):
        docx_markdown(docx_bomb())
    assert time.monotonic() - started < 0.5


def test_a_docx_whose_parts_use_a_compression_word_never_writes_is_refused_before_inflating():
    with zipfile.ZipFile(io.BytesIO(docx_document([("", "Text.")]))) as archive:
        parts = {name: archive.read(name) for name in archive.namelist()}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_BZIP2) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    with pytest.raises(DocumentError, match=r"compressed with method 12, which Word never uses"):
        docx_markdown(out.getvalue())


def test_an_entry_that_inflates_past_what_its_header_declares_is_read_no_further():
    started = time.monotonic()
    with pytest.raises(DocumentError, match=r"word/document\.xml is damaged or not what its header says"):
        docx_markdown(docx_bomb(inflated=1024 * MiB, declared=4096))
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
        ({f"word/media/{n}.png": b"" for n in range(MAX_ENTRIES + 1)}, f"more than {MAX_ENTRIES}; not read"),
        ({"xl/workbook.xml": b"<workbook/>"}, r"a zip but not a Word document: it has no word/document\.xml"),
        (
            {"word/document.xml": b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaa">]><d>&a;</d>'},
            r"word/document\.xml declares a DTD",
        ),
        ({"word/document.xml": '<!DOCTYPE d SYSTEM "file:///etc/passwd"><d/>'.encode("utf-16-le")}, "declares a DTD"),
    ],
    ids=["entries", "not-word", "dtd", "dtd-utf-16"],
)
def test_a_zip_that_is_not_a_safe_word_document_is_refused(entries, reason):
    with pytest.raises(DocumentError, match=reason):
        docx_markdown(_zip(entries))


def test_a_file_that_is_not_a_zip_is_not_a_docx():
    with pytest.raises(DocumentError, match="not a readable zip file"):
        docx_markdown(b"PK\x03\x04 and no more")


def test_extraction_dispatches_documents_by_type():
    extracted = extract_page(pdf_document(["Known text."]), media_type=PDF, charset=None, url="https://a.example/m")
    assert extracted.content == "Known text." and extracted.content_hash
    extracted = extract_page(docx_document([("", "Known words.")]), media_type=DOCX, charset=None, url="https://a")
    assert extracted.content.strip() == "Known words."


def test_each_type_has_its_kind_and_its_cap():
    config = CrawlerConfig(max_body_bytes=10, max_document_bytes=1000)
    assert [page_kind(t) for t in ("text/html", "application/xhtml+xml", "text/plain", PDF, DOCX, "image/png")] == [
        "html",
        "html",
        "text",
        "pdf",
        "docx",
        None,
    ]
    assert page_cap(PDF, url="https://a/x", config=config).max_bytes == 1000
    assert page_cap(DOCX, url="https://a/x", config=config).max_bytes == 1000
    assert page_cap("text/html", url="https://a/x.pdf", config=config).max_bytes == 10
    assert page_cap("application/octet-stream", url="https://a/files/X.PDF?v=1", config=config).max_bytes == 1000
    with pytest.raises(FetchFailed, match="unsupported content type 'application/octet-stream'; only HTML, XHTML"):
        page_cap("application/octet-stream", url="https://a/files/x", config=config)
    with pytest.raises(FetchFailed, match="unsupported content type 'image/png'"):
        page_cap("image/png", url="https://a/x.pdf", config=config)


def test_an_untyped_body_is_the_document_its_url_names_only_when_its_bytes_agree():
    pdf, docx = pdf_document(["x"]), docx_document([("", "x")])
    assert sniffed_document(pdf, url="https://a/m.pdf") == PDF
    assert sniffed_document(b"\xef\xbb\xbf junk then %PDF-1.7", url="https://a/m.pdf") == PDF
    assert sniffed_document(docx, url="https://a/s.docx") == DOCX
    assert sniffed_document(docx, url="https://a/s.pdf") is None
    assert sniffed_document(pdf, url="https://a/m") is None
    assert page_type("application/octet-stream", pdf, url="https://a/m.pdf") == PDF
    assert page_type(PDF, b"anything", url="https://a/m") == PDF
    with pytest.raises(FetchFailed, match="its first bytes are not those of the document its URL names"):
        page_type("application/octet-stream", b"<html>", url="https://a/m.pdf")


def test_the_run_summary_mentions_documents_only_when_there_were_some():
    report = CrawlReport(blob_key="k", blob_url="u")
    report.count(CrawlRecord(url="https://a/p", status="success", kind="html"))
    assert "document" not in report.summary()
    report.count(CrawlRecord(url="https://a/m.pdf", status="success", kind="pdf"))
    report.count(CrawlRecord(url="https://a/b.pdf", status="failed", kind="pdf", error="no text layer"))
    report.count(CrawlRecord(url="https://a/s.docx", status="success", kind="docx"))
    report.count(CrawlRecord(url="https://a/gone", status="failed", error="HTTP 404"))
    assert "; 3 documents (1 DOCX, 2 PDF), 1 of them failed; " in report.summary()
    assert dict(report.kinds) == {"html": 1, "pdf": 2, "docx": 1}


def test_a_worker_runs_under_its_address_space_cap():
    workers = ExtractionWorkers(1, timeout=30)
    try:
        workers.extract(b"<p>warm</p>", media_type="text/html", charset="utf-8", url="https://a/")
        [pid] = workers.pids
        with open(f"/proc/{pid}/limits") as limits:
            [line] = [line for line in limits if line.startswith("Max address space")]
        assert line.split()[3] == str(ADDRESS_SPACE_BYTES)  # the soft limit, in bytes
    finally:
        workers.close()
