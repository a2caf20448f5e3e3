"""The links a page offers a site crawl, read from the tree extraction already parsed.

Followed: `<a href>` and `<area href>`, resolved against `<base href>` when the page has one.
Not followed: links marked `rel=nofollow`, every link of a page whose robots meta tag says
`nofollow` (or `none`), `download` links (files, not pages) unless they name a document the crawl reads
(`.pdf`, `.docx`), and anything but http(s). The
nofollow hints are honoured as the site's word on where crawlers need not go (login and logout
links, sort and filter variants, calendars): the traps a crawl bounded by max pages should not
spend its budget on. At most MAX_LINKS_PER_PAGE are taken from a page, the first in document order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipelines_dagster.core.crawl.extract.extracted import named_document
from pipelines_dagster.core.crawl.urls import absolute_url

if TYPE_CHECKING:
    from lxml.html import HtmlElement

_LINK_TAGS = ("a", "area")
# Links taken from one page: a site's real pages link to hundreds, an index to a few thousand; a
# page with more is a link farm or a trap, whose every link resolved costs time and memory (a
# 5 MiB page holds 240,000). Scrapy's and Firecrawl's crawls bound them likewise.
MAX_LINKS_PER_PAGE = 10_000
# Distinct hrefs read from one page, links or not (mailto:, javascript:, nofollow are resolved or
# checked too): so a page of junk hrefs is as bounded as one of links.
_MAX_HREFS_READ = 5 * MAX_LINKS_PER_PAGE


@dataclass(frozen=True, kw_only=True)
class PageLinks:
    """A page's links, normalized and de-duplicated in document order, and its canonical URL."""

    links: list[str]
    canonical: str | None


def page_links(tree: HtmlElement, *, page_url: str) -> PageLinks:
    """The links and canonical URL of a parsed page fetched from `page_url` (after redirects).

    Reads `tree` without changing it, so it can run before trafilatura is handed the same tree.
    Stops at MAX_LINKS_PER_PAGE links (or _MAX_HREFS_READ hrefs): the rest are not even resolved.
    """
    root = tree.getroottree().getroot()
    base = _base_url(root, page_url=page_url)
    canonical = None
    for link in root.iter("link"):
        href = link.get("href")
        if href and "canonical" in _tokens(link.get("rel")):
            canonical = absolute_url(href, base=base)
            break
    if _robots_nofollow(root):
        return PageLinks(links=[], canonical=canonical)
    links: dict[str, None] = {}
    # A page repeats most of its hrefs (navigation in the header, the sidebar and the footer):
    # each is resolved once.
    resolved: set[str] = set()
    for anchor in root.iter(*_LINK_TAGS):
        href = anchor.get("href")
        if href is None or href in resolved:
            continue
        if "nofollow" in _tokens(anchor.get("rel")):
            continue
        if anchor.get("download") is not None and named_document(href) is None:
            continue
        resolved.add(href)
        if (url := absolute_url(href, base=base)) is not None:
            links.setdefault(url)
            if len(links) == MAX_LINKS_PER_PAGE:
                break
        if len(resolved) == _MAX_HREFS_READ:
            break
    return PageLinks(links=list(links), canonical=canonical)


def _base_url(root: HtmlElement, *, page_url: str) -> str:
    """What relative links resolve against: the first <base href>, itself resolved against the
    page's URL, as the HTML standard says; the page's URL when there is none, or it is not http(s)."""
    for base in root.iter("base"):
        href = base.get("href")
        if href is not None:
            return absolute_url(href, base=page_url) or page_url
    return page_url


def _robots_nofollow(root: HtmlElement) -> bool:
    return any(
        (meta.get("name") or "").strip().lower() == "robots"
        and {"nofollow", "none"} & {token.strip().lower() for token in (meta.get("content") or "").split(",")}
        for meta in root.iter("meta")
    )


def _tokens(attribute: str | None) -> set[str]:
    """An HTML space-separated token list (`rel`), compared case-insensitively."""
    return set((attribute or "").lower().split())
