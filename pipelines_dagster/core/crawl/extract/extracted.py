"""What the crawler and the extraction workers share: the media types extracted, and the result.

Apart from `extract.page`, so the crawling process never imports trafilatura and lxml: only the
worker processes extract, and every run process loads the crawler's modules with the code location.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PLAIN_TEXT = "text/plain"


@dataclass(frozen=True)
class Extracted:
    """A page's text (markdown for HTML), the hash of its normalized form, and its metadata.

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
