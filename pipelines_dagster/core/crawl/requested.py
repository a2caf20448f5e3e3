"""What a fetch is for (a crawled page, a robots.txt, a rendered page's subresource), and so which rules its hops
follow beyond the address guard and host slots."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines_dagster.core.crawl.robots import ROBOTS_MAX_REDIRECTS


@dataclass(frozen=True)
class Requested:
    """What a fetch is for, and so which rules its hops follow beyond the address guard and host slots."""

    page: bool
    """A crawled page: robots.txt is obeyed, redirects stay in the crawl's scope, and a redirect's
    target is requested conditionally on what the last crawl stored there."""
    max_redirects: int | None = None
    """None: the crawl's max_redirects."""
    max_attempts: int | None = None
    """None: the crawl's max_attempts."""
    accept: str | None = None
    """None: the client's Accept header, the one for pages."""


PAGE = Requested(page=True)
# RFC 9309: robots.txt itself is not subject to robots.txt, and its redirects are followed wherever they lead.
ROBOTS_TXT = Requested(page=False, max_redirects=ROBOTS_MAX_REDIRECTS)
# A browser does not retry a subresource, and a page's render budget has no room for backoff.
SUBRESOURCE = Requested(page=False, max_attempts=1, accept="*/*")
