"""What the crawler and the extraction workers share: the media types extracted, and the result.

Apart from `extract`, so the crawling process never imports trafilatura and lxml: only the
worker processes extract, and every run process loads the crawler's modules with the code location.
"""

from __future__ import annotations

from dataclasses import dataclass

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PLAIN_TEXT = "text/plain"


@dataclass(frozen=True)
class Extracted:
    """A page's text (markdown for HTML), the hash of its normalized form, and its metadata.

    `content_hash` is None when the page has no text.
    """

    content: str
    content_hash: str | None
    metadata: dict[str, str | None]
