"""Which pages are rendered: a web connector's `render` setting, the `auto` rule that reads a plain fetch, and
the per-host memory that renders a script-built site's pages without checking each first.

`never` takes every page as its plain fetch extracts it; `always` renders every HTML page; `auto` renders a
page only when its plain fetch extracts thin text for its HTML (`needs_rendering`). Stored in the connector's
config under RENDER_KEY, and only when chosen: a connector that never chose follows its crawl mode's default
(`default_render`), so switching it between a list and a site crawl brings that mode's default with it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pipelines_dagster.core.crawl.extract.extracted import HTML_TYPES
from pipelines_dagster.core.crawl.site.config import CrawlMode, crawl_mode
from pipelines_dagster.core.validation import validate_choice

RENDER_KEY = "RENDER"


class RenderMode(enum.StrEnum):
    NEVER = "never"
    AUTO = "auto"
    ALWAYS = "always"


def default_render(mode: CrawlMode) -> RenderMode:
    """`never` for a list crawl, `auto` for a site crawl.

    A list names pages a user picked, usually ones they have seen fetch well, and a list crawl of a few hundred
    URLs runs often (hourly change watches): rendering its thin pages would cost a browser for pages nobody
    asked to render. A site crawl meets pages nobody looked at first, and documentation sites are where
    script-written text is common, so there the rule decides, at the cost of one check per page.
    """
    return RenderMode.AUTO if mode is CrawlMode.SITE else RenderMode.NEVER


def validate_render(value: object, *, field: str = "render") -> RenderMode:
    """The setting as a user gives it; an error that lists the choices otherwise."""
    return validate_choice(RenderMode, value, field=field, what="render setting")


def render_mode(config: Mapping[str, Any]) -> RenderMode:
    """A connector's render setting from its config: the one chosen, else its crawl mode's default."""
    chosen = config.get(RENDER_KEY)
    return default_render(crawl_mode(config)) if chosen is None else validate_render(chosen)


# The `auto` rule. A page is rendered when its plain fetch extracts thin text and either its HTML is large or
# it is an app shell. Thin is under THIN_TEXT_CHARS characters of extracted text (whitespace collapsed): less
# than a short paragraph, so an article, a docs page or a listing never counts, however much markup surrounds
# it. Large is at least LARGE_HTML_BYTES of HTML: what a page of that size delivers without text is scripts,
# inline state and framework markup, which is what a browser turns into the text (SurfSense escalates to its
# browser on the same two measures). A small page with little text (a short note or notice) is left as fetched:
# rendering finds no more in it. An app shell (an empty mount element such as `<div id="root"></div>`, or a
# `<noscript>` asking for JavaScript) says outright that script writes the page, so it is rendered whatever
# its size, as long as its text is thin: a server-rendered page that keeps a `<noscript>` notice has its text
# already. A page that is not HTML (plain text) is never rendered: there is no script to run.
THIN_TEXT_CHARS = 500
LARGE_HTML_BYTES = 8 * 1024

_MOUNT_IDS = "root|app|__next|__nuxt|___gatsby|svelte|main-app"
# An element whose id names a framework's mount point, holding nothing but whitespace.
_EMPTY_MOUNT = re.compile(
    rf"<(div|main|section|body)\b[^>]*?\sid\s*=\s*[\"']?(?:{_MOUNT_IDS})(?=[\"'\s/>])[^>]*>\s*</\1\s*>"
    r"|<app-root\b[^>]*>\s*</app-root\s*>",
    re.IGNORECASE,
)
# The longest <noscript> read for a request for JavaScript: a notice is a sentence or two, while a longer one
# holds a page's fallback content, text the plain fetch already extracted.
_NOSCRIPT_LOOK = 2000


def needs_rendering(*, media_type: str, html: bytes, text: str) -> bool:
    """Whether `auto` renders a page whose plain fetch gave `html` (the body, of `media_type`) and extracted
    `text`: thin text with large HTML, or thin text in an app shell. Never a page that is not HTML."""
    if media_type.split(";")[0].strip().lower() not in HTML_TYPES:
        return False
    if not _is_thin(text):
        return False
    return len(html) >= LARGE_HTML_BYTES or is_app_shell(html.decode("utf-8", errors="replace"))


def _is_thin(text: str) -> bool:
    """Under THIN_TEXT_CHARS characters once whitespace is collapsed."""
    # A page with text has it early, so its first few thousand characters settle most pages without a pass
    # over the whole of a long one.
    return all(len(" ".join(part.split())) < THIN_TEXT_CHARS for part in (text[: 4 * THIN_TEXT_CHARS], text))


def is_app_shell(html: str) -> bool:
    """An empty framework mount element, or a `<noscript>` that asks for JavaScript."""
    return _EMPTY_MOUNT.search(html) is not None or _asks_for_javascript(html.lower())


def _asks_for_javascript(lowered: str) -> bool:
    close = -1
    start = lowered.find("<noscript")
    while start != -1:
        # The close is looked up again only once passed, so a page of unclosed tags costs one pass.
        if close < start:
            close = lowered.find("</noscript", start)
            if close == -1:
                return False
        if close - start <= _NOSCRIPT_LOOK and "javascript" in lowered[start:close]:
            return True
        start = lowered.find("<noscript", start + 1)
    return False


class Step(enum.StrEnum):
    """What a page of a host goes through under `auto`."""

    CHECK = "check"
    """Fetch it plainly, extract, and render it if `needs_rendering` says so."""
    RENDER = "render"
    """Its host's pages all needed rendering: render it without extracting the plain fetch first."""


# Eight in a row: a site with script-built pages among its static ones breaks a streak that long within a few
# pages of crawl order, while a uniform site settles on its first eight. One re-check in 25 costs a settled
# host 4 % of its pages in a plain extraction each.
SETTLE_AFTER = 8
RECHECK_EVERY = 25


@dataclass(kw_only=True)
class _Host:
    needed: bool
    """What the latest checked page of the host needed."""
    streak: int
    """How many checked pages in a row needed the same."""
    unchecked: int = 0
    """Pages rendered on the settled verdict since the last check."""


class RenderMemory:
    """What each host's pages needed under `auto`, so a script-built site's pages are rendered straight away
    instead of being extracted twice (the plain fetch, then the rendered page).

    A host settles once `settle_after` pages checked in a row all needed rendering: its later pages are rendered
    without the check. A settled host still has one page in `recheck_every` checked, so a site that moves its
    text out of script is noticed: a check that disagrees unsettles the host. Pages of hosts that did not need
    rendering are always checked: the check is the plain extraction every page gets anyway plus a look at its
    HTML, so skipping it would save nothing and would miss a section of script-built pages on a static host.
    A crawl seeds the memory with what the previous crawl of the pipeline found (`record` per stored page).
    """

    def __init__(self, *, settle_after: int = SETTLE_AFTER, recheck_every: int = RECHECK_EVERY) -> None:
        if settle_after < 1 or recheck_every < 1:
            raise ValueError("settle_after and recheck_every are at least 1")
        self.settle_after = settle_after
        self.recheck_every = recheck_every
        self._hosts: dict[str, _Host] = {}

    def next_step(self, url: str) -> Step:
        """The step for the next page at `url`, counted as taken: a settled host's page is rendered without its
        check until its turn for a re-check comes."""
        host = self._hosts.get(_host_of(url))
        if host is None or not host.needed or host.streak < self.settle_after:
            return Step.CHECK
        if host.unchecked + 1 >= self.recheck_every:
            return Step.CHECK
        host.unchecked += 1
        return Step.RENDER

    def record(self, url: str, *, needed: bool) -> None:
        """What the check of a page at `url` found: whether it needed rendering."""
        key = _host_of(url)
        host = self._hosts.get(key)
        if host is None or host.needed != needed:
            self._hosts[key] = _Host(needed=needed, streak=1)
        else:
            host.streak += 1
            host.unchecked = 0


def _host_of(url: str) -> str:
    """The host a page's verdict is kept under: its host and port, lower-cased."""
    return urlsplit(url).netloc.lower().rpartition("@")[2]
