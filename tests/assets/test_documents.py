"""PDF and DOCX documents through whole runs to the KB, on a real loopback site and real extraction workers: their text
lands as KB documents, a re-crawl of unchanged files asks conditionally and parses nothing, an edit shows on the
timeline with its diff, a site crawl follows links to them, and hostile files fail alone while the crawl succeeds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.models import PageChange
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.core.crawl.extract.extracted import DOCX, PDF
from pipelines_dagster.core.crawl.extract.workers import ExtractionWorkers
from pipelines_dagster.core.crawl.record import read_crawl
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.crawl_metadata import CrawlMetadata
from tests.assets.conftest import Stack, materialization
from tests.assets.test_crawl_observability import run_log
from tests.support.documents import MALFORMED_PDF, docx_bomb, docx_document, pdf_document, scanned_pdf
from tests.support.web import Reply, Request, page

ALL = [crawl_results, kb_documents, page_changes]
MiB = 1024 * 1024
MANUAL_TEXT = "Installing the pump takes two people."
SPEC_TEXT = "Every frame starts with its length."
MODIFIED = "Tue, 01 Dec 2026 10:00:00 GMT"


def manual(extra: str = "") -> bytes:
    return pdf_document(
        [MANUAL_TEXT, f"Bleed the valve before the first start.{extra}"],
        outline=[("Installation", 0, 1), ("First start", 1, 1)],
        title="Pump manual",
    )


SPEC = docx_document([("Heading1", "Wire format"), ("", SPEC_TEXT)], title="Wire spec")


def conditional(body: bytes, content_type: str, *, etag: str, last_modified: str) -> Callable[[Request], Reply]:
    """A handler that answers 304 to a request carrying the file's validators, else the file with them."""

    def answer(request: Request) -> Reply:
        headers = request.headers
        if headers.get("if-none-match") == etag or headers.get("if-modified-since") == last_modified:
            return Reply(status=304, content_type=None, headers={"ETag": etag})
        return Reply(body=body, content_type=content_type, headers={"ETag": etag, "Last-Modified": last_modified})

    return answer


@pytest.fixture
def extractions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The URLs every extraction worker was asked to extract, in this process: the real call, counted."""
    asked: list[str] = []
    lock = threading.Lock()
    real = ExtractionWorkers.extract

    def counted(self: ExtractionWorkers, body: bytes, **request: object):
        with lock:
            asked.append(str(request["url"]))
        return real(self, body, **request)

    monkeypatch.setattr(ExtractionWorkers, "extract", counted)
    yield asked


def test_a_pdf_and_a_docx_land_as_kb_documents_and_an_unchanged_recrawl_parses_nothing(
    embedded: Stack, extractions: list[str]
) -> None:
    web = embedded.web
    web.handle("/manual.pdf", conditional(manual(), PDF, etag='"m1"', last_modified=MODIFIED))
    # A server that ignores validators: the same bytes again are unchanged all the same, by their hash.
    web.route("/spec.docx", Reply(body=SPEC, content_type=DOCX, headers={"ETag": '"s1"'}))
    web.route("/guide", page("Guide", "Read the pump manual before you start."))
    urls = {name: web.url(f"/{name}") for name in ("manual.pdf", "spec.docx", "guide")}
    workspace_id, pipeline_id = embedded.pipeline(list(urls.values()))

    first = embedded.run(pipeline_id, workspace_id, assets=ALL)
    assert first.success
    documents = {document.url: document for document in embedded.documents(workspace_id)}
    pdf, docx = documents[urls["manual.pdf"]], documents[urls["spec.docx"]]
    assert MANUAL_TEXT in (pdf.content or "") and "# First start" in (pdf.content or "")
    assert SPEC_TEXT in (docx.content or "") and (docx.content or "").startswith("# Wire format")
    assert (pdf.title, docx.title) == ("Pump manual", "Wire spec")
    metadata = CrawlMetadata.read(materialization(first, "crawl_results"))
    kinds = {record.url: record.kind for record in read_crawl(embedded.blob, metadata.blob_key or "")}
    assert kinds == {urls["manual.pdf"]: "pdf", urls["spec.docx"]: "docx", urls["guide"]: "html"}
    assert (metadata.pages_html, metadata.pages_text, metadata.pages_pdf, metadata.pages_docx) == (1, 0, 1, 1)
    [summary] = [line for line in run_log(embedded.instance, first.run_id) if "crawl finished" in line]
    assert "; 2 documents (1 DOCX, 1 PDF); " in summary
    assert sorted(extractions) == sorted(urls.values())

    extractions.clear()
    before = len(web.requests)
    second = embedded.run(pipeline_id, workspace_id, assets=ALL)
    assert second.success
    asked = {request.path: request.headers for request in web.requests[before:]}
    assert asked["/manual.pdf"]["if-none-match"] == '"m1"'
    assert asked["/manual.pdf"]["if-modified-since"] == MODIFIED
    assert asked["/spec.docx"]["if-none-match"] == '"s1"'
    assert extractions == []  # nothing was parsed: no extraction request reached a worker
    again = CrawlMetadata.read(materialization(second, "crawl_results"))
    assert (again.urls_unchanged, again.pages_pdf, again.pages_docx) == (3, 1, 1)
    records = {record.url: record for record in read_crawl(embedded.blob, again.blob_key or "")}
    assert records[urls["manual.pdf"]].kind == "pdf" and records[urls["manual.pdf"]].http_status == 304
    assert MANUAL_TEXT in records[urls["manual.pdf"]].content

    web.handle(
        "/manual.pdf",
        conditional(manual(" Then close it again."), PDF, etag='"m2"', last_modified="Wed, 02 Dec 2026 10:00:00 GMT"),
    )
    third = embedded.run(pipeline_id, workspace_id, assets=ALL)
    assert third.success and extractions == [urls["manual.pdf"]]
    with embedded.sessions() as session:
        [changed] = session.scalars(
            sa.select(PageChange).where(PageChange.run_id == third.run_id, PageChange.status == "changed")
        ).all()
    assert changed.url == urls["manual.pdf"]
    assert "+Bleed the valve before the first start. Then close it again." in (changed.diff or "")


def test_a_site_crawl_follows_links_to_documents_within_its_scope(embedded: Stack) -> None:
    web = embedded.web
    home = (
        "<html><head><title>Docs</title></head><body><article><h1>Docs</h1><p>The manuals for every pump we make, "
        'kept here.</p><a href="/manual.pdf">Manual</a> <a href="/spec.docx" download>Spec</a></article></body></html>'
    )
    web.route("/", Reply(body=home))
    web.route("/manual.pdf", Reply(body=manual(), content_type=PDF))
    web.route("/spec.docx", Reply(body=SPEC, content_type="application/octet-stream"))
    workspace_id, pipeline_id = embedded.pipeline([], site=SiteConfig.validated(start_urls=[web.url("/")]))
    assert embedded.run(pipeline_id, workspace_id).success
    content = {document.url: document.content or "" for document in embedded.documents(workspace_id)}
    assert MANUAL_TEXT in content[web.url("/manual.pdf")] and SPEC_TEXT in content[web.url("/spec.docx")]


def test_hostile_documents_fail_alone_and_the_rest_of_the_crawl_lands_in_the_kb(embedded: Stack) -> None:
    web = embedded.web
    sent = [0]

    def gigabyte() -> Iterator[bytes]:
        piece = b"%PDF-1.7\n" + b"0" * (MiB - 9)
        for _ in range(1024):
            sent[0] += len(piece)
            yield piece
            piece = bytes(MiB)

    web.route("/broken.pdf", Reply(body=MALFORMED_PDF, content_type=PDF))
    web.route("/bomb.docx", Reply(body=docx_bomb(), content_type=DOCX))
    web.route("/huge.pdf", Reply(content_type=PDF, stream=gigabyte, chunked=True))
    web.route("/scanned.pdf", Reply(body=scanned_pdf(), content_type=PDF))
    web.route("/manual.pdf", Reply(body=manual(), content_type=PDF))
    hostile = [web.url(f"/{name}") for name in ("broken.pdf", "bomb.docx", "huge.pdf", "scanned.pdf")]
    good = [web.url("/manual.pdf"), *embedded.site(15)]
    workspace_id, pipeline_id = embedded.pipeline(hostile + good)
    result = embedded.run(pipeline_id, workspace_id)
    assert result.success  # 16 of 20 succeeded: the crawl is healthy at the default 0.8
    metadata = CrawlMetadata.read(materialization(result, "crawl_results"))
    assert (metadata.urls_succeeded, metadata.urls_failed, metadata.pages_pdf, metadata.pages_docx) == (16, 4, 4, 1)
    rows = materialization(result, "crawl_results")["failed_urls"].records
    failed = {row.data["url"].removeprefix(web.base_url): row.data["reason"] for row in rows}
    assert failed["/broken.pdf"].startswith("the PDF could not be read")
    assert "zip bomb" in failed["/bomb.docx"]
    assert failed["/huge.pdf"] == "body larger than 52428800 bytes"
    assert "no text layer" in failed["/scanned.pdf"] and "OCR is not done" in failed["/scanned.pdf"]
    assert sent[0] <= 52428800 + 16 * MiB
    documents = {document.url: document for document in embedded.documents(workspace_id)}
    assert all(documents[url].content for url in good)
    assert all(url not in documents or not documents[url].content for url in hostile)
    [summary] = [line for line in run_log(embedded.instance, result.run_id) if "crawl finished" in line]
    assert "; 5 documents (1 DOCX, 4 PDF), 4 of them failed; " in summary
