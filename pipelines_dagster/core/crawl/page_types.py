"""Which bodies a crawl reads as pages, and how far: HTML, XHTML and plain text to the page cap, PDF and DOCX to
the larger document cap; a file served untyped (application/octet-stream) is read as a document only when its
URL names one (.pdf, .docx) and its first bytes are that kind of file's."""

from __future__ import annotations

from pipelines_dagster.core.crawl.body import BodyCap
from pipelines_dagster.core.crawl.extract.extracted import (
    DOCUMENT_TYPES,
    PAGE_TYPES,
    UNTYPED,
    named_document,
    sniffed_document,
)
from pipelines_dagster.core.crawl.types import CrawlerConfig, FetchFailed

_READ = "only HTML, XHTML, plain text, PDF and DOCX are crawled"


def page_cap(media_type: str, *, url: str, config: CrawlerConfig) -> BodyCap:
    """How much of a page body of `media_type` is read; FetchFailed when the crawl does not read that type."""
    if media_type in DOCUMENT_TYPES or (media_type in UNTYPED and named_document(url) is not None):
        return BodyCap(config.max_document_bytes, document=True)
    if media_type in PAGE_TYPES:
        return BodyCap(config.max_body_bytes)
    raise FetchFailed(f"unsupported content type {media_type or '(none declared)'!r}; {_READ}")


def page_type(media_type: str, body: bytes, *, url: str) -> str:
    """The type a page body read under `page_cap` is extracted as: the one declared, or what an untyped
    body turns out to be; FetchFailed when an untyped body is not the document its URL names."""
    if media_type not in UNTYPED:
        return media_type
    sniffed = sniffed_document(body, url=url)
    if sniffed is None:
        raise FetchFailed(
            f"served as {media_type!r} and its first bytes are not those of the document its URL names; {_READ}"
        )
    return sniffed
