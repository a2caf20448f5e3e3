"""The `auto` rule on pages as the extraction worker reads them (static docs, app shells, large markup with
little text, short pages, plain text), and the per-host memory: settling, unsettling, re-checks, and its
state saved and restored."""

from __future__ import annotations

import pytest

from pipelines_dagster.core.crawl.extract.page import extract_page
from pipelines_dagster.core.crawl.render.rule import (
    LARGE_HTML_BYTES,
    RenderMemory,
    RenderMode,
    Step,
    default_render,
    is_app_shell,
    needs_rendering,
    render_mode,
)
from pipelines_dagster.core.crawl.site.config import CrawlMode
from pipelines_dagster.core.errors import InvalidInputError
from tests.support.web import html_document

URL = "https://docs.example.com/guide"
# Stands for a framework's inlined bundle and state: markup a browser turns into text, none of it text itself.
BUNDLE = "<script>" + "window.__state = {};" * 600 + "</script>"


def verdict(html: str, *, media_type: str = "text/html") -> bool:
    """The rule on `html` as the crawler would see it: the body, and the text the real extractor gets from it."""
    body = html.encode()
    text = extract_page(body, media_type=media_type, charset="utf-8", url=URL).content
    return needs_rendering(media_type=media_type, html=body, text=text)


DOCS = "\n\n".join(f"Step {n}: configure the crawler's option number {n} as the reference says." for n in range(20))


def test_a_static_docs_page_is_not_rendered_even_with_large_markup():
    page = html_document("Guide", DOCS).replace("</body>", f"{BUNDLE}</body>")
    assert len(page) > LARGE_HTML_BYTES
    assert not verdict(page)


@pytest.mark.parametrize(
    "shell",
    [
        '<div id="root"></div>',
        "<div id=app>\n  </div>",
        '<div class="wrap" id="__next"></div>',
        "<app-root></app-root>",
        '<div id="main"></div><noscript>You need to enable <b>JavaScript</b> to run this app.</noscript>',
    ],
)
def test_a_small_js_app_shell_is_rendered(shell: str):
    head = '<head><title>App</title><script src="/app.js"></script></head>'
    page = f"<!DOCTYPE html><html>{head}<body>{shell}</body></html>"
    assert len(page) < LARGE_HTML_BYTES
    assert verdict(page)


def test_a_mount_point_that_holds_the_text_or_another_id_is_no_shell():
    assert not is_app_shell('<div id="root"><p>Served text</p></div>')
    assert not is_app_shell('<div id="root-nav"></div><div data-id="app"></div>')
    assert not is_app_shell("<noscript><img src='/pixel.gif'></noscript>")


def test_only_a_short_closed_noscript_that_asks_for_javascript_makes_a_shell():
    assert is_app_shell("<NOSCRIPT>Please turn on <em>JavaScript</em>.</NOSCRIPT>")
    assert is_app_shell("<noscript><img src='/p.gif'></noscript><noscript>Enable JavaScript</noscript>")
    # A long one is a page's fallback content, which the plain fetch already extracted.
    assert not is_app_shell("<noscript>" + "<p>Fallback text.</p>" * 200 + "Needs JavaScript.</noscript>")
    # An unclosed one holds no notice; the word in a script after it is not one.
    assert not is_app_shell("<noscript><img src='/p.gif'><script type='text/javascript'></script>")


def test_a_server_rendered_app_keeps_its_text_and_is_not_rendered():
    page = html_document("Guide", DOCS).replace("</body>", "<noscript>Enable JavaScript for search.</noscript></body>")
    assert not verdict(page)


def test_big_html_with_small_text_is_rendered():
    page = f"<!DOCTYPE html><html><head><title>Loading</title>{BUNDLE}</head><body><p>Loading...</p></body></html>"
    assert verdict(page)


def test_a_small_page_with_small_text_is_not_rendered():
    assert not verdict(html_document("Moved", "This page moved to the handbook."))


def test_plain_text_is_never_rendered_however_thin():
    assert not verdict("x", media_type="text/plain")
    assert not needs_rendering(media_type="text/plain; charset=utf-8", html=b'<div id="root"></div>' * 1000, text="")
    assert needs_rendering(media_type="text/HTML; charset=utf-8", html=b'<div id="root"></div>', text="")


def test_the_setting_defaults_by_crawl_mode_and_refuses_an_unknown_value():
    assert (default_render(CrawlMode.LIST), default_render(CrawlMode.SITE)) == (RenderMode.NEVER, RenderMode.AUTO)
    assert render_mode({}) is RenderMode.NEVER
    assert render_mode({"CRAWL_MODE": "site"}) is RenderMode.AUTO
    assert render_mode({"CRAWL_MODE": "site", "RENDER": "never"}) is RenderMode.NEVER
    with pytest.raises(InvalidInputError) as raised:
        render_mode({"RENDER": "sometimes"})
    assert (raised.value.field, raised.value.message) == (
        "render",
        "unknown render setting 'sometimes'; use one of never, auto, always",
    )


def check_pages(memory: RenderMemory, url: str, needed: bool, count: int) -> list[Step]:
    """The steps of `count` pages at `url`, each checked page recorded as `needed`."""
    steps = []
    for _ in range(count):
        steps.append(memory.next_step(url))
        if steps[-1] is Step.CHECK:
            memory.record(url, needed=needed)
    return steps


def test_a_host_settles_after_its_pages_all_needed_rendering_and_others_are_apart():
    memory = RenderMemory(settle_after=3, recheck_every=100)
    assert check_pages(memory, "https://app.example.com/a", True, 5) == [Step.CHECK] * 3 + [Step.RENDER] * 2
    assert memory.next_step("https://other.example.com/") is Step.CHECK
    assert memory.next_step("https://APP.example.com/b?x=1") is Step.RENDER


def test_a_host_that_never_needed_rendering_keeps_every_page_checked():
    memory = RenderMemory(settle_after=3, recheck_every=100)
    assert check_pages(memory, "https://docs.example.com/a", False, 10) == [Step.CHECK] * 10


def test_a_host_whose_pages_differ_is_checked_page_by_page():
    memory = RenderMemory(settle_after=3, recheck_every=100)
    for needed in [True, True, False, True, True, False, True, True]:
        assert memory.next_step("https://mixed.example.com/") is Step.CHECK
        memory.record("https://mixed.example.com/", needed=needed)


def test_a_settled_host_is_rechecked_and_a_disagreeing_check_unsettles_it():
    memory = RenderMemory(settle_after=2, recheck_every=4)
    url = "https://app.example.com/"
    assert check_pages(memory, url, True, 8) == [Step.CHECK] * 2 + [Step.RENDER] * 3 + [Step.CHECK] + [Step.RENDER] * 2
    assert memory.next_step(url) is Step.RENDER
    assert memory.next_step(url) is Step.CHECK
    memory.record(url, needed=False)
    assert check_pages(memory, url, True, 3) == [Step.CHECK, Step.CHECK, Step.RENDER]
