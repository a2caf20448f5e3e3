"""A page's links for a site crawl: resolution (relative, <base href>), fragments, canonical,
schemes, and the links not followed (nofollow, download links to files the crawl does not read)."""

from __future__ import annotations

import lxml.html
import pytest
import trafilatura

from pipelines_dagster.core.crawl.extract.links import MAX_LINKS_PER_PAGE, PageLinks, page_links
from pipelines_dagster.core.crawl.extract.page import decode_body, extract_page

PAGE = "https://www.example.com/docs/guide/intro.html"


def links_of_html(body: bytes, *, page_url: str, charset: str | None) -> PageLinks:
    """page_links of a fetched HTML body, decoded and parsed as extraction does."""
    tree = trafilatura.load_html(decode_body(body, charset=charset, html=True))
    return PageLinks(links=[], canonical=None) if tree is None else page_links(tree, page_url=page_url)


def links(html: str, *, page_url: str = PAGE) -> PageLinks:
    return links_of_html(html.encode("utf-8"), page_url=page_url, charset="utf-8")


def body(anchors: str, head: str = "") -> str:
    return f"<!DOCTYPE html><html><head><title>t</title>{head}</head><body><p>text</p>{anchors}</body></html>"


@pytest.mark.parametrize(
    ("href", "resolved"),
    [
        ("setup.html", "https://www.example.com/docs/guide/setup.html"),
        ("../api/", "https://www.example.com/docs/api/"),
        ("/pricing", "https://www.example.com/pricing"),
        ("?page=2", "https://www.example.com/docs/guide/intro.html?page=2"),
        ("//cdn.example.com/file", "https://cdn.example.com/file"),
        ("HTTP://Other.Example.org:80/x", "http://other.example.org/x"),
        ("  setup.html\n", "https://www.example.com/docs/guide/setup.html"),
        ("", "https://www.example.com/docs/guide/intro.html"),
        # fragments go: a link to a part of a page is a link to the page
        ("#install", "https://www.example.com/docs/guide/intro.html"),
        ("setup.html#step-2", "https://www.example.com/docs/guide/setup.html"),
    ],
)
def test_links_resolve_against_the_page(href, resolved):
    assert links(body(f'<a href="{href}">x</a>')).links == [resolved]


@pytest.mark.parametrize(
    "href",
    [
        "mailto:team@example.com",
        "javascript:void(0)",
        "JavaScript:alert(1)",
        "tel:+46701234567",
        "data:text/html,hi",
        "ftp://ftp.example.com/file",
        "https://user:pw@www.example.com/",
        "http://[broken/",
    ],
)
def test_links_that_are_not_http_pages_are_skipped(href):
    assert links(body(f'<a href="{href}">x</a>')).links == []


def test_a_base_href_is_what_relative_links_resolve_against():
    head = '<base href="/v2/reference/"><base href="https://elsewhere.example/">'
    found = links(body('<a href="call.html">c</a><a href="../faq">f</a><a href="/abs">a</a>', head))
    assert found.links == [
        "https://www.example.com/v2/reference/call.html",
        "https://www.example.com/v2/faq",
        "https://www.example.com/abs",
    ]
    # a base with only a target, or one that is not http(s), leaves the page's URL in charge
    only_target = links(body('<a href="x">x</a>', '<base target="_blank"><base href="https://b.example/">'))
    assert only_target.links == ["https://b.example/x"]
    assert links(body('<a href="x">x</a>', '<base href="javascript:alert(1)">')).links == [
        "https://www.example.com/docs/guide/x"
    ]


def test_links_are_de_duplicated_in_document_order_and_area_links_count():
    html = body(
        '<a href="/b">b</a><a href="/a#top">a</a><a href="/b#more">b again</a>'
        '<map name="m"><area href="/c" alt="c"><area nohref alt="none"></map><a name="anchor-only">n</a>'
        '<link rel="stylesheet" href="/style.css">'
    )
    assert links(html).links == [
        "https://www.example.com/b",
        "https://www.example.com/a",
        "https://www.example.com/c",
    ]


def test_nofollow_links_and_download_links_to_files_the_crawl_does_not_read_are_not_followed():
    html = body(
        '<a href="/logout" rel="NoFollow noopener">out</a><a href="/site.zip" download>zip</a>'
        '<a href="/kept" rel="noopener">kept</a><a href="/Report.PDF" download>pdf</a>'
        '<a href="/spec.docx?v=2" download="spec.docx">docx</a><a href="/manual.pdf" rel="nofollow" download>no</a>'
    )
    assert links(html).links == [
        "https://www.example.com/kept",
        "https://www.example.com/Report.PDF",
        "https://www.example.com/spec.docx?v=2",
    ]


@pytest.mark.parametrize("content", ["noindex, nofollow", "NOFOLLOW", "none"])
def test_a_page_whose_robots_meta_says_nofollow_offers_no_links_but_keeps_its_canonical(content):
    head = f'<meta name="Robots" content="{content}"><link rel="canonical" href="/docs/guide/">'
    found = links(body('<a href="/a">a</a>', head))
    assert found == PageLinks(links=[], canonical="https://www.example.com/docs/guide/")


def test_a_robots_meta_that_allows_following_changes_nothing():
    head = '<meta name="robots" content="noindex"><meta name="description" content="nofollow">'
    assert links(body('<a href="/a">a</a>', head)).links == ["https://www.example.com/a"]


@pytest.mark.parametrize(
    ("head", "canonical"),
    [
        (
            '<link rel="canonical" href="https://www.example.com/docs/guide/intro">',
            "https://www.example.com/docs/guide/intro",
        ),
        ('<link rel="Canonical" href="intro?ref=nav#top">', "https://www.example.com/docs/guide/intro?ref=nav"),
        ('<base href="/v2/"><link rel="canonical" href="intro">', "https://www.example.com/v2/intro"),
        (
            '<link rel="alternate canonical" href="/one"><link rel="canonical" href="/two">',
            "https://www.example.com/one",
        ),
        ('<link rel="alternate" hreflang="sv" href="/sv/">', None),
        ('<link rel="canonical">', None),
        ('<link rel="canonical" href="mailto:x@example.com">', None),
        ("", None),
    ],
)
def test_the_canonical_link_is_resolved(head, canonical):
    assert links(body("", head)).canonical == canonical


def test_the_tree_is_read_without_being_changed():
    html = body('<a href="/a#x">a</a>', '<base href="/v2/"><link rel="canonical" href="/c">')
    tree = lxml.html.document_fromstring(html)
    before = lxml.html.tostring(tree)
    found = page_links(tree, page_url=PAGE)
    assert found == PageLinks(links=["https://www.example.com/a"], canonical="https://www.example.com/c")
    assert lxml.html.tostring(tree) == before
    # any element of the document serves: the links are the whole page's
    assert page_links(tree.find("body"), page_url=PAGE) == found


def test_the_body_is_decoded_by_its_charset_as_extraction_decodes_it():
    html = body('<a href="/café">c</a><a href="/na%C3%AFve">n</a>')
    latin = links_of_html(html.encode("iso-8859-1"), page_url=PAGE, charset="iso-8859-1")
    declared = links_of_html(
        html.replace("<title>", '<meta charset="iso-8859-1"><title>').encode("iso-8859-1"), page_url=PAGE, charset=None
    )
    expected = ["https://www.example.com/caf%C3%A9", "https://www.example.com/na%C3%AFve"]
    assert latin.links == expected and declared.links == expected


@pytest.mark.parametrize("html", [b"", b"   ", b"\x00\x01\x02"])
def test_a_body_that_is_no_page_has_no_links(html):
    assert links_of_html(html, page_url=PAGE, charset=None) == PageLinks(links=[], canonical=None)


def test_a_page_with_more_links_than_the_cap_yields_the_first_ones_in_document_order():
    anchors = "".join(f'<a href="/p/{number}">{number}</a>' for number in range(MAX_LINKS_PER_PAGE + 500))
    found = links(body('<a href="/p/0">again</a>' + anchors)).links
    assert found == [f"https://www.example.com/p/{number}" for number in range(MAX_LINKS_PER_PAGE)]


def test_a_page_of_hrefs_that_are_not_links_is_read_only_so_far():
    junk = [f'<a href="mailto:user{number}@example.com">m</a>' for number in range(5 * MAX_LINKS_PER_PAGE)]
    assert links(body("".join(junk) + '<a href="/past-the-junk">x</a>')).links == []
    within = "".join(junk[: len(junk) // 2]) + '<a href="/within">x</a>'
    assert links(body(within)).links == ["https://www.example.com/within"]


def test_extraction_reads_a_page_only_to_its_first_links_and_keeps_the_text_after_them():
    anchors = "".join(f'<a href="/p/{number}">label{number}</a> ' for number in range(MAX_LINKS_PER_PAGE + 500))
    html = body(anchors + "<p>The closing paragraph explains what the index is for, in a sentence or two.</p>")
    page = extract_page(html.encode(), media_type="text/html", charset="utf-8", url=PAGE, links=True)
    assert len(page.links) == MAX_LINKS_PER_PAGE
    # The anchors past the cap never reach trafilatura, whose cost grows with every element it weighs.
    assert f"label{MAX_LINKS_PER_PAGE - 1}" in page.content and f"label{MAX_LINKS_PER_PAGE}" not in page.content
    assert "The closing paragraph explains what the index is for" in page.content
