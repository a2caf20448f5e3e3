"""Shared parts of the crawl benches: a seeded corpus of documentation-like pages, a keep-alive
HTTP/1.1 server for it in its own process, and an embedded stack that materializes `crawl_results`.

Run as a script (`_corpus.py serve ROOT PORT`) it is the server: uvicorn (httptools, uvloop) over a
raw ASGI app that answers from memory with ETag and Last-Modified and honours conditional requests.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from hashlib import sha256
from html import escape
from pathlib import Path
from typing import Any, Self

KiB = 1024
MiB = 1024 * KiB
ROBOTS_TXT = b"User-agent: *\nAllow: /\n"
# One fixed modification time, so Last-Modified is the same on every run of a bench.
LAST_MODIFIED = formatdate(1_700_000_000, usegmt=True)
REPO = Path(__file__).resolve().parents[1]

_WORDS = [
    "pipeline",
    "asset",
    "partition",
    "sensor",
    "schedule",
    "resource",
    "executor",
    "worker",
    "queue",
    "broker",
    "cluster",
    "node",
    "replica",
    "shard",
    "index",
    "document",
    "folder",
    "workspace",
    "connector",
    "crawler",
    "request",
    "response",
    "header",
    "body",
    "timeout",
    "retry",
    "backoff",
    "cache",
    "token",
    "session",
    "account",
    "credit",
    "ledger",
    "charge",
    "invoice",
    "usage",
    "quota",
    "limit",
    "window",
    "buffer",
    "stream",
    "chunk",
    "record",
    "line",
    "field",
    "column",
    "table",
    "schema",
    "migration",
    "revision",
    "engine",
    "driver",
    "pool",
    "connection",
    "socket",
    "address",
    "network",
    "gateway",
    "proxy",
    "certificate",
    "handshake",
    "cipher",
    "digest",
    "signature",
    "secret",
    "key",
    "value",
    "store",
    "bucket",
    "object",
    "prefix",
    "upload",
    "download",
    "mirror",
    "snapshot",
    "backup",
    "restore",
    "replay",
    "event",
    "cursor",
    "offset",
    "watermark",
    "checkpoint",
    "job",
    "task",
    "step",
    "run",
    "launcher",
    "daemon",
    "webserver",
    "console",
    "dashboard",
    "metric",
    "gauge",
    "counter",
    "histogram",
    "trace",
    "span",
    "log",
    "level",
    "handler",
    "formatter",
    "filter",
    "policy",
    "rule",
    "guard",
    "check",
    "validation",
    "error",
    "warning",
    "failure",
    "status",
    "code",
    "message",
    "payload",
    "format",
    "encoding",
    "charset",
    "language",
    "locale",
    "timezone",
    "calendar",
    "cron",
    "interval",
    "deadline",
    "lease",
    "lock",
    "owner",
    "renewal",
    "expiry",
    "release",
    "handoff",
    "consumer",
    "producer",
    "topic",
    "subscription",
    "webhook",
    "delivery",
    "endpoint",
    "route",
    "path",
    "query",
    "parameter",
    "argument",
    "option",
    "flag",
    "default",
    "override",
    "environment",
    "variable",
    "setting",
    "profile",
    "deployment",
    "release",
    "version",
    "tag",
    "branch",
    "commit",
    "build",
    "artifact",
    "image",
    "container",
    "volume",
    "mount",
    "permission",
    "role",
    "scope",
    "grant",
    "audit",
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "for",
    "on",
    "with",
    "by",
    "from",
    "at",
    "as",
    "is",
    "are",
    "be",
    "can",
    "will",
    "may",
    "should",
    "must",
    "not",
    "and",
    "or",
    "each",
    "every",
    "when",
    "then",
    "while",
    "after",
    "before",
    "until",
    "unless",
    "only",
    "also",
    "still",
    "already",
    "often",
    "rarely",
    "configure",
    "create",
    "delete",
    "update",
    "read",
    "write",
    "fetch",
    "parse",
    "extract",
    "normalize",
    "compare",
    "merge",
    "split",
    "join",
    "sort",
    "filter",
    "map",
    "reduce",
    "collect",
    "emit",
    "publish",
    "subscribe",
    "acknowledge",
    "reject",
    "accept",
    "refuse",
    "allow",
    "deny",
    "enable",
    "disable",
    "start",
    "stop",
    "pause",
    "resume",
    "cancel",
    "schedule",
    "trigger",
    "launch",
    "monitor",
    "quickly",
    "safely",
    "reliably",
    "eventually",
    "exactly",
    "approximately",
    "automatically",
    "manually",
    "explicitly",
]
_TOPICS = (
    "Getting started",
    "Installation",
    "Configuration reference",
    "Authentication",
    "Rate limits",
    "Webhooks",
    "Scheduling runs",
    "Partitions",
    "Retries and backoff",
    "Storage backends",
    "Monitoring",
    "Troubleshooting",
    "Upgrading",
    "Security model",
    "Billing",
    "Command line",
    "HTTP API",
    "Data model",
    "Migrations",
    "Deployment",
    "Concurrency",
    "Caching",
    "Logging",
)
_LANGUAGES = ("python", "bash", "yaml", "json", "sql")


class _Page:
    """One seeded documentation page built up as a list of HTML fragments."""

    # What follows a subsection's paragraphs: the method drawn when a roll in [0, 1) falls below its
    # odds (the first that fits); past the last, nothing.
    BLOCKS: tuple[tuple[float, str], ...] = ((0.35, "listing"), (0.55, "table"), (0.75, "code"))

    def __init__(self, rng: random.Random, index: int, pages: int) -> None:
        self.rng = rng
        self.index = index
        self.pages = pages
        self.parts: list[str] = []
        self.size = 0

    def add(self, fragment: str) -> None:
        self.parts.append(fragment)
        self.size += len(fragment)

    def words(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(_WORDS, k=self.rng.randint(low, high)))

    def sentence(self) -> str:
        text = self.words(8, 22)
        if self.rng.random() < 0.3:
            word = self.rng.choice(_WORDS)
            text += f" <code>{word}_{self.rng.randint(1, 99)}</code>"
        if self.rng.random() < 0.2:
            target = self.rng.randrange(self.pages)
            text += f' (see <a href="/docs/page-{target:05d}.html">{self.words(2, 4)}</a>)'
        return text[0].upper() + text[1:] + "."

    def paragraph(self) -> str:
        return "<p>" + " ".join(self.sentence() for _ in range(self.rng.randint(3, 7))) + "</p>\n"

    def listing(self) -> str:
        tag = self.rng.choice(("ul", "ol"))
        items = "".join(f"<li>{self.sentence()}</li>" for _ in range(self.rng.randint(3, 8)))
        return f"<{tag}>{items}</{tag}>\n"

    def table(self) -> str:
        columns = self.rng.randint(3, 5)
        head = "".join(f"<th>{self.words(1, 2).title()}</th>" for _ in range(columns))
        rows = "".join(
            "<tr>" + "".join(f"<td>{self.words(1, 5)}</td>" for _ in range(columns)) + "</tr>"
            for _ in range(self.rng.randint(4, 10))
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>\n"

    def code(self) -> str:
        lines = "\n".join(
            f"{self.rng.choice(_WORDS)}_{n} = {self.rng.choice(_WORDS)}({self.rng.randint(0, 999)})"
            for n in range(self.rng.randint(3, 12))
        )
        language = self.rng.choice(_LANGUAGES)
        return f'<pre><code class="language-{language}">{escape(lines)}</code></pre>\n'

    def heading(self, level: int, anchor: str, text: str) -> str:
        return f'<h{level} id="{anchor}">{text}</h{level}>\n'

    def block(self) -> str:
        """What follows a subsection's paragraphs, if anything, drawn by the odds in BLOCKS."""
        roll = self.rng.random()
        return next((getattr(self, name)() for odds, name in self.BLOCKS if roll < odds), "")

    def section(self, number: int) -> str:
        rng = self.rng
        parts = [self.heading(2, f"s{number}", f"{number}. {self.words(2, 5).capitalize()}")]
        for sub in range(rng.randint(1, 3)):
            if sub:
                parts.append(self.heading(3, f"s{number}-{sub}", f"{number}.{sub} {self.words(2, 4).capitalize()}"))
            parts.extend(self.paragraph() for _ in range(rng.randint(1, 3)))
            parts.append(self.block())
        return "".join(parts)


def page_html(rng: random.Random, index: int, *, pages: int, min_bytes: int) -> bytes:
    """A documentation page of at least `min_bytes`: site chrome, metadata and seeded sections."""
    page = _Page(rng, index, pages)
    topic = rng.choice(_TOPICS)
    title = f"{topic}: {page.words(2, 4)} (page {index})"
    description = page.sentence()
    year, month, day = 2020 + rng.randrange(5), rng.randint(1, 12), rng.randint(1, 28)
    menu = "".join(
        f'<li><a href="/docs/page-{rng.randrange(pages):05d}.html">{escape(name)}</a></li>' for name in _TOPICS
    )
    page.add(
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>{escape(title)}</title>\n'
        f'<meta name="description" content="{escape(description)}">\n'
        f'<meta name="author" content="Docs Team {rng.randint(1, 9)}">\n'
        f'<meta property="article:published_time" content="{year}-{month:02d}-{day:02d}">\n'
        '<link rel="stylesheet" href="/static/site.css"></head>\n<body>\n'
        '<header class="site-header"><a class="logo" href="/">Pipelines Docs</a>'
        f'<nav class="top"><ul>{menu}</ul></nav></header>\n'
        f'<aside class="sidebar"><ul>{menu}</ul></aside>\n'
        f'<main><article><h1>{escape(title)}</h1>\n<p class="lead">{description}</p>\n'
    )
    footer = (
        "</article></main>\n<footer><p>Copyright Pipelines Docs. "
        f"Last updated {year}-{month:02d}-{day:02d}.</p><ul>{menu}</ul></footer>\n</body></html>\n"
    )
    number = 1
    while page.size + len(footer) < min_bytes:
        page.add(page.section(number))
        number += 1
    page.add(footer)
    return "".join(page.parts).encode("utf-8")


def page_paths(pages: int) -> list[str]:
    """The URL paths of a corpus of `pages` pages, in order."""
    return [f"/docs/page-{index:05d}.html" for index in range(pages)]


def write_corpus(root: Path, *, pages: int, min_bytes: int, seed: int, spread: int = 0) -> list[str]:
    """Write `pages` seeded pages of at least `min_bytes` (plus a seeded 0..`spread` more) under
    root/docs; return their URL paths in order."""
    rng = random.Random(seed)
    (root / "docs").mkdir(parents=True, exist_ok=True)
    paths = page_paths(pages)
    for index, path in enumerate(paths):
        size = min_bytes + (rng.randrange(spread) if spread else 0)
        (root / path.lstrip("/")).write_bytes(page_html(rng, index, pages=pages, min_bytes=size))
    return paths


# -- a documentation site as the common docs themes render it ---------------------------------------

_ICONS = (
    "search",
    "menu",
    "close",
    "github",
    "copy",
    "edit",
    "link",
    "arrow-left",
    "arrow-right",
    "info",
    "warning",
    "external",
    "sun",
    "moon",
)
_CSS_BLOCKS = (
    "md-header",
    "md-nav",
    "md-sidebar",
    "md-content",
    "md-footer",
    "md-search",
    "md-tabs",
    "md-typeset",
    "md-source",
    "md-top",
    "md-banner",
    "md-dialog",
)
_CSS_PARTS = ("item", "link", "title", "icon", "list", "inner", "wrap", "container", "toggle", "label")


class _DocsPage(_Page):
    """A page body as Sphinx, MkDocs Material or Docusaurus render one: sections with anchor links,
    admonitions, and code highlighted token by token (Pygments-style spans) with a copy button."""

    BLOCKS = ((0.25, "listing"), (0.4, "table"), (0.75, "code"), (0.85, "admonition"))

    def __init__(self, rng: random.Random, index: int, pages: int) -> None:
        super().__init__(rng, index, pages)
        self.headings: list[tuple[str, str]] = []

    def sentence(self) -> str:
        """A sentence with the inline markup docs generators emit: code literals, cross-references, emphasis."""
        rng = self.rng
        text = self.words(8, 22)
        if rng.random() < 0.5:
            text += (
                f' <code class="docutils literal notranslate"><span class="pre">{rng.choice(_WORDS)}_'
                f"{rng.randint(1, 99)}</span></code>"
            )
        if rng.random() < 0.35:
            target = rng.randrange(self.pages)
            text += (
                f' (see <a class="reference internal" href="/docs/page-{target:05d}.html#s1" '
                f'title="{self.words(2, 4)}"><span class="std std-ref">{self.words(2, 4)}</span></a>)'
            )
        if rng.random() < 0.2:
            text += f" <em>{self.words(1, 3)}</em> {self.words(2, 6)}"
        return text[0].upper() + text[1:] + "."

    def code(self) -> str:
        rng = self.rng
        lines = []
        for number in range(rng.randint(4, 16)):
            name, call, literal = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS)
            lines.append(
                f'<span class="n">{name}_{number}</span> <span class="o">=</span> <span class="n">{call}</span>'
                f'<span class="p">(</span><span class="s2">&quot;{literal}&quot;</span><span class="p">,</span> '
                f'<span class="n">limit</span><span class="o">=</span><span class="mi">{rng.randint(0, 999)}</span>'
                '<span class="p">)</span>'
            )
        return (
            f'<div class="highlight-{rng.choice(_LANGUAGES)} notranslate"><div class="highlight"><pre><span></span>'
            + "\n".join(lines)
            + '</pre><button class="md-clipboard" title="Copy to clipboard"><svg class="md-icon">'
            '<use href="#icon-copy"></use></svg></button></div></div>\n'
        )

    def admonition(self) -> str:
        kind = self.rng.choice(("note", "tip", "warning", "important"))
        title = f'<p class="admonition-title">{kind.title()}</p>'
        return f'<div class="admonition {kind}">{title}{self.paragraph()}</div>\n'

    def heading(self, level: int, anchor: str, text: str) -> str:
        self.headings.append((anchor, text))
        return (
            f'<h{level} id="{anchor}">{text}<a class="headerlink" href="#{anchor}" '
            f'title="Link to this heading">#</a></h{level}>\n'
        )

    def section(self, number: int) -> str:
        return f'<section id="section-{number}">{super().section(number)}</section>\n'


class DocsSite:
    """A seeded documentation site of `pages` pages in `len(_TOPICS)` sections, marked up the way the
    common docs themes (Sphinx Furo / Read the Docs, MkDocs Material, Docusaurus) render a page:

    - the same site chrome on every page: head with Open Graph tags, preloads, inline critical CSS and
      a theme script; an inline SVG icon sprite; a header with logo, search form, version and
      repository links; section tabs; a footer with link columns;
    - per page: a sidebar with every section and the current section's pages, breadcrumbs, an
      "edit this page" link, an on-page table of contents, previous / next links;
    - the article: sections with anchor links, paragraphs, lists, tables, admonitions and
      token-highlighted code.
    """

    def __init__(self, *, pages: int, seed: int) -> None:
        rng = random.Random(seed)
        self.pages = pages
        words = _Page(rng, 0, pages).words
        self.titles = [f"{rng.choice(_TOPICS)}: {words(2, 4)}".capitalize() for _ in range(pages)]
        self.section_of = [index * len(_TOPICS) // pages for index in range(pages)]
        self.members: list[list[int]] = [[] for _ in _TOPICS]
        for index, section in enumerate(self.section_of):
            self.members[section].append(index)
        css = "".join(
            f".{block}__{part}{rng.choice(('', '--active', '--nested', ':hover'))}{{"
            f"color:#{rng.randrange(16**6):06x};padding:{rng.randint(0, 24)}px {rng.randint(0, 24)}px;"
            f"margin:0 0 {rng.randint(0, 16)}px;font-size:.{rng.randint(6, 9)}rem}}"
            for block in _CSS_BLOCKS
            for part in _CSS_PARTS[: rng.randint(4, len(_CSS_PARTS))]
        )
        sprite = "".join(
            f'<symbol id="icon-{name}" viewBox="0 0 24 24"><path d="M'
            + " ".join(f"{rng.uniform(0, 24):.2f} {rng.uniform(0, 24):.2f}" for _ in range(rng.randint(20, 50)))
            + 'z"/></symbol>'
            for name in _ICONS
        )
        tabs = "".join(
            f'<li class="md-tabs__item"><a class="md-tabs__link" href="{self.href(members[0])}">'
            f"{escape(_TOPICS[section])}</a></li>"
            for section, members in enumerate(self.members)
            if members
        )
        columns = "".join(
            '<div class="footer-column"><p class="footer-title">'
            + escape(_TOPICS[section])
            + "</p><ul>"
            + "".join(
                f'<li><a href="{self.href(index)}">{escape(self.titles[index])}</a></li>'
                for index in self.members[section][:6]
            )
            + "</ul></div>"
            for section in range(0, len(_TOPICS), 4)
        )
        self.head = (
            '<meta name="viewport" content="width=device-width,initial-scale=1">\n'
            '<meta name="generator" content="docs-theme 9.5">\n'
            '<link rel="icon" href="/assets/favicon.png">\n'
            + "".join(
                f'<link rel="preload" href="/assets/{name}" as="{kind}">\n'
                for name, kind in (
                    ("fonts/inter-400.woff2", "font"),
                    ("fonts/inter-600.woff2", "font"),
                    ("fonts/mono-400.woff2", "font"),
                    ("javascripts/bundle.js", "script"),
                )
            )
            + '<link rel="stylesheet" href="/assets/stylesheets/main.css">\n'
            '<link rel="stylesheet" href="/assets/stylesheets/palette.css">\n'
            f"<style>{css}</style>\n"
            '<script>var __config={"base":"/","features":["navigation.tabs","navigation.sections",'
            '"content.code.copy","search.highlight"],"search":"/assets/javascripts/workers/search.js",'
            '"translations":{"clipboard.copy":"Copy to clipboard","clipboard.copied":"Copied",'
            '"search.result.none":"No matching documents","search.result.one":"1 matching document"}};'
            'document.documentElement.dataset.theme=localStorage.getItem("theme")||"light";</script>\n'
        )
        self.top = (
            f'<svg xmlns="http://www.w3.org/2000/svg" style="display:none">{sprite}</svg>\n'
            '<header class="md-header"><nav class="md-header__inner"><a class="md-header__logo" href="/">'
            '<svg class="md-icon"><use href="#icon-menu"></use></svg> Pipelines Docs</a>'
            '<form class="md-search" role="search" action="/search/"><input class="md-search__input" '
            'type="text" name="q" placeholder="Search" autocomplete="off"><button class="md-search__icon">'
            '<svg class="md-icon"><use href="#icon-search"></use></svg></button></form>'
            '<div class="md-version"><button class="md-version__current">v2.4</button><ul>'
            + "".join(f'<li><a href="/v{version}/">v{version}</a></li>' for version in ("2.4", "2.3", "2.2", "1.9"))
            + '</ul></div><a class="md-source" href="https://github.com/example/pipelines">'
            '<svg class="md-icon"><use href="#icon-github"></use></svg> example/pipelines</a>'
            '<button class="md-theme"><svg class="md-icon"><use href="#icon-moon"></use></svg></button>'
            f'</nav><nav class="md-tabs"><ul class="md-tabs__list">{tabs}</ul></nav></header>\n'
        )
        self.bottom = (
            f'<footer class="md-footer"><div class="md-footer__columns">{columns}</div>'
            '<p class="md-copyright">Copyright 2019-2025 Pipelines Docs contributors. Built with a docs '
            'theme.</p></footer>\n<script src="/assets/javascripts/bundle.js"></script>\n</body></html>\n'
        )

    @staticmethod
    def href(index: int) -> str:
        return f"/docs/page-{index:05d}.html"

    def link(self, index: int, css: str) -> str:
        return f'<a class="{css}" href="{self.href(index)}">{escape(self.titles[index])}</a>'

    def sidebar(self, index: int) -> str:
        current = self.section_of[index]
        items = []
        for section, members in enumerate(self.members):
            if not members:
                continue
            nested = ""
            if section == current:
                nested = (
                    '<ul class="md-nav__list">'
                    + "".join(
                        f'<li class="md-nav__item{" md-nav__item--active" if member == index else ""}">'
                        + self.link(member, "md-nav__link")
                        + "</li>"
                        for member in members
                    )
                    + "</ul>"
                )
            active = " md-nav__item--active" if section == current else ""
            items.append(
                f'<li class="md-nav__item md-nav__item--section{active}"><label class="md-nav__title">'
                f'<a class="md-nav__link" href="{self.href(members[0])}">{escape(_TOPICS[section])}</a>'
                f"</label>{nested}</li>"
            )
        return (
            '<div class="md-sidebar md-sidebar--primary"><nav class="md-nav md-nav--primary" '
            f'aria-label="Navigation"><ul class="md-nav__list">{"".join(items)}</ul></nav></div>\n'
        )

    def page(self, rng: random.Random, index: int, *, min_bytes: int) -> bytes:
        """Page `index`, at least `min_bytes` long (the article grows to fit)."""
        page = _DocsPage(rng, index, self.pages)
        title = self.titles[index]
        description = page.sentence()
        year, month, day = 2020 + rng.randrange(5), rng.randint(1, 12), rng.randint(1, 28)
        section = self.section_of[index]
        head = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>{escape(title)} - '
            f'Pipelines Docs</title>\n<meta name="description" content="{escape(description)}">\n'
            f'<meta name="author" content="Docs Team {rng.randint(1, 9)}">\n'
            f'<meta property="og:title" content="{escape(title)}">\n<meta property="og:type" content="article">\n'
            f'<meta property="article:published_time" content="{year}-{month:02d}-{day:02d}">\n'
            f'<link rel="canonical" href="https://docs.example.com{self.href(index)}">\n'
            f"{self.head}</head>\n<body>\n{self.top}{self.sidebar(index)}"
            '<main class="md-main"><div class="md-content"><nav class="md-path" aria-label="Breadcrumbs"><ol>'
            f'<li><a href="/">Docs</a></li><li><a href="{self.href(self.members[section][0])}">'
            f"{escape(_TOPICS[section])}</a></li><li>{escape(title)}</li></ol></nav>\n"
            f'<article class="md-content__inner md-typeset"><a class="md-content__button" '
            f'href="https://github.com/example/pipelines/edit/main/docs/page-{index:05d}.md" title="Edit this page">'
            f'<svg class="md-icon"><use href="#icon-edit"></use></svg></a>\n<h1>{escape(title)}</h1>\n'
            f'<p class="lead">{description}</p>\n'
        )
        previous, following = (index - 1) % self.pages, (index + 1) % self.pages
        tail = (
            f'<p class="md-source-file">Last updated {year}-{month:02d}-{day:02d}</p></article>\n'
            '<nav class="md-footer__nav" aria-label="Footer">'
            f"{self.link(previous, 'md-footer__link md-footer__link--prev')}"
            f"{self.link(following, 'md-footer__link md-footer__link--next')}</nav></div></main>\n"
        )
        page.add(head)
        number = 1
        # The table of contents lists about 60 bytes a heading; budget for it as the article grows.
        while page.size + len(tail) + len(self.bottom) + 60 * len(page.headings) < min_bytes or number <= 2:
            page.add(page.section(number))
            number += 1
        toc = "".join(
            f'<li class="md-nav__item"><a class="md-nav__link" href="#{anchor}">{escape(heading)}</a></li>'
            for anchor, heading in page.headings
        )
        page.add(tail)
        page.add(
            '<div class="md-sidebar md-sidebar--secondary"><nav class="md-nav md-nav--secondary" '
            f'aria-label="On this page"><label class="md-nav__title">On this page</label><ul>{toc}</ul></nav>'
            "</div>\n"
        )
        page.add(self.bottom)
        return "".join(page.parts).encode("utf-8")

    def home(self, rng: random.Random) -> bytes:
        """The site's index page at /: the same chrome, a welcome, and each section's first pages.

        A site crawl starts here; the rest of the site is two links away (a section's first page,
        then the section's pages in its sidebar), as on a real docs site.
        """
        page = _DocsPage(rng, 0, self.pages)
        sections = "".join(
            f"<li>{self.link(members[0], 'md-nav__link')}<ul>"
            + "".join(f"<li>{self.link(member, 'md-nav__link')}</li>" for member in members[1:4])
            + "</ul></li>"
            for members in self.members
            if members
        )
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>Pipelines Docs</title>\n'
            f'<meta name="description" content="{escape(page.sentence())}">\n{self.head}</head>\n<body>\n'
            f'{self.top}{self.sidebar(0)}<main class="md-main"><div class="md-content">'
            '<article class="md-content__inner md-typeset"><h1>Pipelines Docs</h1>\n'
            f"{page.paragraph()}{page.paragraph()}<h2>Sections</h2><ul>{sections}</ul></article></div></main>\n"
            f"{self.bottom}"
        ).encode()


def write_docs_site(root: Path, *, pages: int, median_bytes: int, seed: int) -> list[str]:
    """Write a `DocsSite` of `pages` pages under root/docs, and its index page (served at /); return
    the pages' URL paths in order.

    Page sizes are log-normal around `median_bytes` (sigma 0.5: 5% of pages under 0.44x the median,
    5% over 2.3x), clipped to 0.4x-5x the median: most pages are guides of moderate length, a few
    are long reference pages.
    """
    rng = random.Random(seed)
    site = DocsSite(pages=pages, seed=seed)
    (root / "docs").mkdir(parents=True, exist_ok=True)
    paths = page_paths(pages)
    for index, path in enumerate(paths):
        size = min(max(rng.lognormvariate(math.log(median_bytes), 0.5), 0.4 * median_bytes), 5 * median_bytes)
        (root / path.lstrip("/")).write_bytes(site.page(rng, index, min_bytes=int(size)))
    # Its own generator, so the pages above are the same with or without it.
    (root / "index.html").write_bytes(site.home(random.Random(seed + 1)))
    return paths


def corpus_stats(root: Path) -> tuple[int, int, int]:
    """(pages, smallest page in bytes, total bytes) of a written corpus."""
    sizes = [entry.stat().st_size for entry in (root / "docs").iterdir()]
    return len(sizes), min(sizes), sum(sizes)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """An HTTP server in a child process on 127.0.0.1: `command` with a free port appended, ready
    once GET `ready_path` answers."""

    name = "server"

    def __init__(self, command: list[str], *, ready_path: str) -> None:
        self.port = free_port()
        self._command = [*command, str(self.port)]
        self._ready_path = ready_path
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def __enter__(self) -> Self:
        self._process = subprocess.Popen(self._command)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SystemExit(f"the {self.name} exited with code {self._process.returncode}")
            try:
                urllib.request.urlopen(self.url(self._ready_path), timeout=1).close()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.__exit__()
        raise SystemExit(f"the {self.name} did not answer within 60 s")

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


class CorpusServer(ServerProcess):
    """The corpus served by `_corpus.py serve` in a child process on 127.0.0.1."""

    name = "corpus server"

    def __init__(self, root: Path) -> None:
        super().__init__([sys.executable, str(Path(__file__).resolve()), "serve", str(root)], ready_path="/robots.txt")
        self.root = root


def _serve(root: Path, port: int) -> None:

    last_modified_at = parsedate_to_datetime(LAST_MODIFIED)
    last_modified = LAST_MODIFIED.encode("ascii")
    files: dict[str, tuple[bytes, bytes]] = {"/robots.txt": (ROBOTS_TXT, b'"robots"')}
    for sitemap in sorted(root.glob("*.xml")):  # sitemaps, when the corpus has them
        files[f"/{sitemap.name}"] = (sitemap.read_bytes(), b'"' + sitemap.name.encode("ascii") + b'"')
    if (root / "index.html").exists():  # the site's home page, when the corpus has one
        body = (root / "index.html").read_bytes()
        files["/"] = (body, b'"' + sha256(body).hexdigest()[:32].encode("ascii") + b'"')
    for entry in sorted((root / "docs").iterdir()):
        body = entry.read_bytes()
        files[f"/docs/{entry.name}"] = (body, b'"' + sha256(body).hexdigest()[:32].encode("ascii") + b'"')

    def not_modified(request: dict[bytes, bytes], etag: bytes) -> bool:
        if b"if-none-match" in request:  # RFC 9110: If-Modified-Since is ignored when If-None-Match is sent
            return etag in [tag.strip() for tag in request[b"if-none-match"].split(b",")] or (
                request[b"if-none-match"].strip() == b"*"
            )
        if b"if-modified-since" in request:
            try:
                return parsedate_to_datetime(request[b"if-modified-since"].decode("latin-1")) >= last_modified_at
            except (TypeError, ValueError):
                return False
        return False

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        found = files.get(scope["path"])
        if found is None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"9")],
                }
            )
            await send({"type": "http.response.body", "body": b"not found"})
            return
        body, etag = found
        headers = [(b"etag", etag), (b"last-modified", last_modified)]
        if not_modified(dict(scope["headers"]), etag):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        content_type = (
            b"text/plain"
            if scope["path"] == "/robots.txt"
            else b"application/xml"
            if scope["path"].endswith(".xml")
            else b"text/html; charset=utf-8"
        )
        headers += [(b"content-type", content_type), (b"content-length", str(len(body)).encode("ascii"))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    serve_asgi(app, port)


class TreeSampler:
    """Samples a process and its descendants in a thread: peak RSS of the main process, of its
    descendants, and of their sum at one instant."""

    def __init__(self, pid: int | None = None, *, interval: float = 0.05) -> None:
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(pid or os.getpid())
        self._interval = interval
        self.peak_main = self.peak_children = self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)

    def _processes(self) -> list[Any]:
        try:
            return [self._root, *self._root.children(recursive=True)]
        except self._psutil.NoSuchProcess:
            return []

    def _sample(self) -> None:
        main = children = 0
        for process in self._processes():
            try:
                rss = process.memory_info().rss
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                continue
            if process.pid == self._root.pid:
                main = rss
            else:
                children += rss
        self.peak_main = max(self.peak_main, main)
        self.peak_children = max(self.peak_children, children)
        self.peak_total = max(self.peak_total, main + children)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> TreeSampler:
        self._sample()
        self._wall_start = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.wall = time.perf_counter() - self._wall_start


class OtherLoad:
    """How busy the rest of the machine kept its cores over a phase, as a share of all of them (`share`):
    the CPU time every process used, less ours (`cpu`: this process's, its children's and `also`'s).

    Children count when they are reaped, with the descendants they reaped in turn (a Dagster run's
    extraction workers), so exact figures need every child of the phase to have exited by its end.
    """

    def __init__(self, *, also: tuple[int, ...] = ()) -> None:
        import psutil

        self._psutil = psutil
        # Processes whose CPU counts as ours although they are not our children (the corpus server).
        self._also = [psutil.Process(pid) for pid in also]

    def _machine(self) -> float:
        times = self._psutil.cpu_times()
        return times.user + times.system + times.nice

    def _ours(self) -> float:
        import resource

        seconds = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            seconds += usage.ru_utime + usage.ru_stime
        for process in self._also:
            times = process.cpu_times()
            seconds += times.user + times.system
        return seconds

    def __enter__(self) -> OtherLoad:
        self._start = (time.perf_counter(), self._machine(), self._ours())
        return self

    def __exit__(self, *exc_info: object) -> None:
        wall, machine, ours = time.perf_counter(), self._machine(), self._ours()
        self.cpu = ours - self._start[2]
        others = (machine - self._start[1]) - self.cpu
        self.share = max(0.0, others) / ((wall - self._start[0]) * (os.cpu_count() or 1))


@dataclass(frozen=True)
class Materialized:
    """One materialization of `crawl_results`: its wall time and its metadata."""

    wall_seconds: float
    metadata: dict[str, Any]
    success: bool


class EmbeddedStack:
    """The embedded default in a temporary directory: a migrated SQLite app DB, a Dagster instance,
    a local blob store, database locks, and the crawler allowed onto loopback."""

    def __init__(self) -> None:
        self._exit = ExitStack()

    def __enter__(self) -> EmbeddedStack:
        import dagster as dg

        from pipelines_dagster.app_db.engine import create_engine, session_factory
        from pipelines_dagster.app_db.migrate import upgrade

        self.dir = Path(self._exit.enter_context(tempfile.TemporaryDirectory(prefix="crawl-bench-")))
        self.engine = create_engine(f"sqlite:///{self.dir / 'app.sqlite3'}")
        self._exit.callback(self.engine.dispose)
        upgrade(self.engine)
        self.sessions = session_factory(self.engine)
        (self.dir / "dagster").mkdir()
        self.instance = self._exit.enter_context(dg.instance_for_test(temp_dir=str(self.dir / "dagster")))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit.close()

    def warm_up(self) -> None:
        """Pay this process's one-off costs of a first Dagster run (imports, storage set-up) before
        measuring: a disabled pipeline is refused by the asset's first guard, before any crawl. A disabled
        pipeline has no partition, so its key is added here, as if it were disabled after a launch was asked."""
        from pipelines_dagster.partitions import add_pipeline_partitions

        workspace_id, pipeline_id = self.pipeline(["http://127.0.0.1:9/"], name="warm-up", enabled=False)
        add_pipeline_partitions(self.instance, [partition_of(self.sessions, pipeline_id)])
        self.materialize(workspace_id, pipeline_id, log_level="CRITICAL")

    def resources(self) -> dict[str, Any]:
        from pipelines_dagster.resources.app_db import AppDatabaseResource
        from pipelines_dagster.resources.billing import BillingResource
        from pipelines_dagster.resources.blob_store import LocalBlobStoreResource
        from pipelines_dagster.resources.crawler import CrawlerResource
        from pipelines_dagster.resources.locks import DatabaseLocksResource
        from pipelines_dagster.resources.network import NetworkAccess
        from pipelines_dagster.resources.notifications import NotificationsResource

        url = self.engine.url.render_as_string(hide_password=False)
        app_db = AppDatabaseResource(url=url)
        return {
            "app_db": app_db,
            "blob_store": LocalBlobStoreResource(root=str(self.dir / "blobs")),
            "locks": DatabaseLocksResource(database_url=url),
            "crawler": CrawlerResource(network=NetworkAccess(allowed_networks=["127.0.0.1/32"])),
            "billing": BillingResource(app_db=app_db, billing_enabled=False),
            "notifications": NotificationsResource(app_db=app_db),
        }

    def pipeline(
        self, urls: list[str], *, name: str = "bench", enabled: bool = True, site: Any = None
    ) -> tuple[int, int]:
        """A workspace with a web connector over `urls` (or discovering `site`, a SiteConfig) and a
        raw-crawl pipeline: (workspace id, pipeline id)."""
        return seed_pipeline(
            self.sessions, self.instance, urls, name=name, save_to_kb=False, enabled=enabled, site=site
        )

    def materialize(self, workspace_id: int, pipeline_id: int, *, log_level: str = "WARNING") -> Materialized:
        """Materialize `crawl_results` for the pipeline in-process and time the whole call."""
        import dagster as dg

        from pipelines_dagster.assets.crawl_results import crawl_results
        from pipelines_dagster.runs import run_tags

        started = time.perf_counter()
        result = dg.materialize(
            [crawl_results],
            partition_key=partition_of(self.sessions, pipeline_id),
            instance=self.instance,
            resources=self.resources(),
            tags=run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )
        wall = time.perf_counter() - started
        events = result.asset_materializations_for_node("crawl_results")
        metadata = {key: value.value for key, value in events[0].metadata.items()} if events else {}
        return Materialized(wall_seconds=wall, metadata=metadata, success=result.success and bool(events))


def write_sitemap(root: Path, paths: list[str]) -> None:
    """/sitemap.xml listing `paths` (relative to the site, which the crawler reads against the sitemap's URL)."""
    entries = "".join(f"<url><loc>{path}</loc></url>" for path in paths)
    (root / "sitemap.xml").write_text(
        f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
    )


def partition_of(sessions: Any, pipeline_id: int) -> str:
    """The pipeline's partition key, as the catalog stores it (its id and name, fixed at creation)."""
    return partitions_of(sessions, [pipeline_id])[pipeline_id]


def partitions_of(sessions: Any, pipeline_ids: list[int]) -> dict[int, str]:
    from pipelines_dagster.core.catalog.pipelines import pipeline_partitions

    with sessions() as session:
        return pipeline_partitions(session, pipeline_ids)


def seed_pipeline(
    sessions: Any,
    instance: Any,
    urls: list[str],
    *,
    name: str,
    save_to_kb: bool,
    enabled: bool = True,
    site: Any = None,
) -> tuple[int, int]:
    """A workspace with a web connector over `urls` and a pipeline over it, its partition registered
    in `instance` as `pipelines-dagster pipeline create` does: (workspace id, pipeline id). A KB
    pipeline saves into the folder "{name} docs"."""
    from pipelines_dagster import services
    from pipelines_dagster.app_db.engine import transaction
    from pipelines_dagster.core.catalog.connectors import create_connector
    from pipelines_dagster.core.catalog.workspaces import create_workspace

    with transaction(sessions) as session:
        workspace = create_workspace(session, name=name, owner_user_id=f"bench-{uuid.uuid4().hex[:6]}")
        connector = create_connector(
            session, workspace_id=workspace.workspace.id, connector_type="webcrawler", urls=urls, site=site
        )
        pipeline = services.create_pipeline(
            session,
            instance,
            workspace_id=workspace.workspace.id,
            connector_id=connector.id,
            name=name,
            save_to_kb=save_to_kb,
            folder_name=f"{name} docs" if save_to_kb else None,
            enabled=enabled,
        )
        return workspace.workspace.id, pipeline.id


class EmbeddedHome:
    """The embedded default in a temporary directory, laid out as a user's: DAGSTER_HOME holding a copy
    of deploy/dagster.yaml, and PIPELINES_DATA_DIR beside it (SQLite app database, local blobs,
    database locks), with the crawler allowed onto loopback.

    `env` is the environment for the processes a user would start on it (none of the caller's own
    PIPELINES_* or DAGSTER_* settings); this process is switched onto the same app database and
    Dagster instance, to seed them and to read what the runs did.
    """

    def __init__(self, **extra_env: str) -> None:
        self._extra_env = extra_env
        self._exit = ExitStack()

    def __enter__(self) -> EmbeddedHome:
        import dagster as dg

        from pipelines_dagster.app_db.engine import create_engine, session_factory
        from pipelines_dagster.app_db.migrate import upgrade
        from pipelines_dagster.settings import load_settings

        self.dir = Path(self._exit.enter_context(tempfile.TemporaryDirectory(prefix="crawl-bench-")))
        home = self.dir / "dagster-home"
        home.mkdir()
        shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
        self.env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINES_", "DAGSTER_"))}
        self.env |= {
            "DAGSTER_HOME": str(home),
            "PIPELINES_DATA_DIR": str(self.dir / "data"),
            "PIPELINES_CRAWLER_ALLOWED_NETWORKS": "127.0.0.1/32",
            **self._extra_env,
        }
        os.environ.clear()
        os.environ.update(self.env)
        self.settings = load_settings()
        self.engine = create_engine(self.settings.resolved_database_url)
        self._exit.callback(self.engine.dispose)
        upgrade(self.engine)
        self.sessions = session_factory(self.engine)
        self.instance = dg.DagsterInstance.get()
        self._exit.callback(self.instance.dispose)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit.close()

    def pipeline(self, urls: list[str], *, name: str, site: Any = None) -> tuple[int, int]:
        """A KB pipeline over `urls` (or discovering `site`, a SiteConfig): (workspace id, pipeline id)."""
        return seed_pipeline(self.sessions, self.instance, urls, name=name, save_to_kb=True, site=site)


BIN = Path(sys.executable).parent
LOCATIONS_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
# Our code location as a workspace.yaml entry, under the name the benches look for.
OUR_LOCATION = "pipelines_dagster"
OUR_LOCATION_YAML = f"""  - python_module:
      module_name: pipelines_dagster.definitions
      working_directory: {REPO}
      location_name: {OUR_LOCATION}
"""


def wait_for(what: str, check: Callable[[], Any], *, timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def dagster_dev_parts(root_pid: int) -> Iterator[tuple[str, Any, str]]:
    """Each live process of a `dagster dev` tree as (part, psutil process, command line). The parts:
    "code server" (a location's `dagster api grpc` server: it evaluates the location's sensors and
    reaps its runs), "code server proxy" (`dagster code-server start`, which starts that one),
    "daemon", "webserver", "dagster dev", and "other" (runs and their workers)."""
    import psutil

    root = psutil.Process(root_pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if " api grpc " in command:
            part = "code server"
        elif "code-server start" in command:
            part = "code server proxy"
        elif "dagster._daemon" in command:
            part = "daemon"
        elif "dagster_webserver" in command:
            part = "webserver"
        elif process.pid == root_pid:
            part = "dagster dev"
        else:
            part = "other"
        yield part, process, command


class DagsterDev:
    """`dagster dev` over the code locations `workspace_yaml` lists (their names in `locations`) on
    an embedded default (`EmbeddedHome`, with PIPELINES_DAGSTER_URL naming the port), whose app
    database and Dagster instance this process shares. Started, it has every location loaded and
    each of `sensors` ticked once."""

    def __init__(
        self, home: EmbeddedHome, *, workspace_yaml: str, locations: tuple[str, ...], sensors: tuple[str, ...]
    ) -> None:
        self.embedded = home
        self.root = home.dir
        self.url = home.env["PIPELINES_DAGSTER_URL"]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.home = Path(home.env["DAGSTER_HOME"])
        self.sessions, self.instance = home.sessions, home.instance
        self.workspace_yaml = workspace_yaml
        self.locations = locations
        self.sensors = sensors
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        workspace = self.root / "workspace.yaml"
        workspace.write_text(self.workspace_yaml)
        self.log = (self.root / "dagster-dev.log").open("wb")
        self.process = subprocess.Popen(
            [str(BIN / "dagster"), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(self.port)],
            cwd=self.root,
            env=self.embedded.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for("the code locations to load", self._locations_loaded, timeout=180, every=0.5)
        # Every sensor named has ticked once: the daemon is up and the next tick of each is at most
        # its interval away.
        wait_for("the daemon's first sensor ticks", self._sensors_ticked, timeout=120, every=0.5)

    def _locations_loaded(self) -> bool:
        import httpx

        if self.process is not None and self.process.poll() is not None:
            raise SystemExit(f"dagster dev exited with code {self.process.returncode}; see {self.log.name}")
        try:
            answer = httpx.post(f"{self.url}/graphql", json={"query": LOCATIONS_QUERY}, timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return False
        entries = {entry["name"]: entry for entry in answer["data"]["workspaceOrError"]["locationEntries"]}
        for name in self.locations:
            error = (entries.get(name) or {}).get("locationOrLoadError") or {}
            if error.get("__typename") == "PythonError":
                raise SystemExit(f"code location {name} failed to load: {error['message']}")
        return all((entries.get(name) or {}).get("loadStatus") == "LOADED" for name in self.locations)

    def _sensors_ticked(self) -> bool:
        return all(self.ticks(name, limit=1) for name in self.sensors)

    def ticks(self, sensor: str, *, after: float | None = None, limit: int | None = None) -> list[Any]:
        """The sensor's ticks (since `after`, epoch seconds), newest first."""
        state = next((state for state in self.instance.all_instigator_state() if state.name == sensor), None)
        if state is None:
            return []
        return list(self.instance.get_ticks(state.instigator_origin_id, state.selector_id, after=after, limit=limit))

    def code_server(self, location: str) -> Any:
        """The psutil process of `location`'s code server, the one that evaluates its sensors."""
        assert self.process is not None
        for part, process, command in dagster_dev_parts(self.process.pid):
            if part == "code server" and f"--location-name {location}" in command:
                return process
        raise SystemExit(f"no code server process for the code location {location}")

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop a process started in a session of its own, and all of its group: SIGTERM, SIGKILL after a minute."""
    if process.poll() is None:
        import signal

        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


RESULT_PREFIX = "BENCH-RESULT "


def run_worker(script: Path, arguments: list[str]) -> dict[str, Any]:
    """Run `script` with `arguments` in a fresh Python process and return the JSON it reports.

    The worker's output passes through; its result is the line starting with RESULT_PREFIX.
    """
    completed = subprocess.run([sys.executable, str(script), *arguments], stdout=subprocess.PIPE, text=True)
    result = None
    for line in completed.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
        else:
            print(line)
    if completed.returncode != 0 or result is None:
        raise SystemExit(f"the bench worker {script.name} {' '.join(arguments)} failed (exit {completed.returncode})")
    return result


def report_result(result: dict[str, Any]) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


@contextmanager
def served(write: Callable[[Path], list[str]]) -> Iterator[tuple[CorpusServer, list[str]]]:
    """The pages `write(root)` writes into a temporary directory (returning their URL paths), served;
    yields the server and the page URLs."""
    with tempfile.TemporaryDirectory(prefix="crawl-corpus-") as directory:
        root = Path(directory)
        paths = write(root)
        with CorpusServer(root) as server:
            yield server, [server.url(path) for path in paths]


def served_corpus(
    *, pages: int, min_bytes: int, seed: int, spread: int = 0, sitemap: bool = False
) -> AbstractContextManager[tuple[CorpusServer, list[str]]]:
    """A freshly written `write_corpus` corpus (with a /sitemap.xml of every page), served; yields the
    server and the page URLs."""

    def write(root: Path) -> list[str]:
        paths = write_corpus(root, pages=pages, min_bytes=min_bytes, seed=seed, spread=spread)
        if sitemap:
            write_sitemap(root, paths)
        return paths

    return served(write)


def serve_asgi(app: Any, port: int) -> None:
    """A bench's raw ASGI server on 127.0.0.1: uvicorn with httptools and uvloop, quiet, until killed."""
    import uvicorn

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        timeout_keep_alive=30,
        backlog=1024,
    )


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        raise SystemExit(f"usage: {Path(sys.argv[0]).name} serve ROOT PORT")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    _serve(Path(sys.argv[2]), int(sys.argv[3]))
