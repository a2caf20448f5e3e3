"""The render bench's loopback site: seeded static articles, and pages whose text only script writes (an inline
script into an empty app root, or a script that fetches the text as JSON from the same site), served from memory
by a threaded HTTP/1.1 server on 127.0.0.1.

Every page carries text of its own: paragraphs of plain words whose first sentence names the page (its marker),
so what a crawl found of a page is read from its extracted content alone.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from _corpus import _TOPICS, _WORDS, ROBOTS_TXT, KiB

STATIC, HEAVY, INLINE, FETCH = "static", "heavy", "inline", "fetch"
JS_KINDS = (INLINE, FETCH)
KINDS = {
    STATIC: "static articles",
    HEAVY: "static articles with inline site config and analytics scripts",
    INLINE: "JS-only, an inline script writes the text into an empty <div id=root>",
    FETCH: "JS-only, a script fetch()es the text as JSON and writes it into an empty <div id=app>",
}
# One JS-only page in four; one static page in three is a heavy one (analytics, inline site config).
JS_EVERY, HEAVY_EVERY = 4, 3

_HTML = "text/html; charset=utf-8"
_CSS = b"body{font:16px/1.5 sans-serif;margin:0}header,footer{background:#eee;padding:1em}article{max-width:50em}"
# What the JS-only pages run: an app that builds the article from its data (the same code for both kinds).
_RENDER_JS = (
    "function render(data){var root=document.getElementById(data.mount);var article=document.createElement("
    "'article');var h=document.createElement('h1');h.textContent=data.title;article.appendChild(h);"
    "data.paragraphs.forEach(function(text){var p=document.createElement('p');p.textContent=text;"
    "article.appendChild(p);});root.appendChild(article);document.title=data.title;}"
)
# An analytics snippet as sites paste it: a queue, a page-view beacon (a GET of an image), no page text.
_ANALYTICS = (
    "window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments);}gtag('js',new Date());"
    "gtag('config','BENCH-1',{anonymize_ip:true});new Image().src='/collect?v=1&t=pageview&dp='+"
    "encodeURIComponent(location.pathname)+'&r='+Math.random();"
)


@dataclass(frozen=True)
class Page:
    path: str
    kind: str
    title: str
    paragraphs: tuple[str, ...]
    """The page's own text; the first paragraph opens with the page's marker sentence."""

    @property
    def marker(self) -> str:
        return self.paragraphs[0].split(". ", 1)[0] + "."


@dataclass(frozen=True)
class Found:
    """What a crawl's extracted content holds of one page's own text."""

    marker: bool
    chars: int


def found_in(page: Page, content: str) -> Found:
    text = " ".join(content.split())
    return Found(
        marker=page.marker in text,
        chars=sum(len(paragraph) for paragraph in page.paragraphs if paragraph in text),
    )


class Site:
    """`pages` seeded pages under /docs/; with `js`, every JS_EVERY-th page is JS-only (inline and fetch()
    in turns), else every page is a static article. Page `index` is the same static page in both variants."""

    def __init__(self, *, pages: int, seed: int, js: bool) -> None:
        self.pages: list[Page] = []
        self.files: dict[str, tuple[bytes, str]] = {
            "/robots.txt": (ROBOTS_TXT, "text/plain"),
            "/static/site.css": (_CSS, "text/css"),
        }
        for index in range(pages):
            rng = random.Random(f"{seed}/{index}")
            kind = _kind(index, js=js)
            page = Page(
                path=f"/docs/page-{index:04d}.html",
                kind=kind,
                title=f"{rng.choice(_TOPICS)}: {_words(rng, 2, 4)}",
                paragraphs=_paragraphs(rng, index, kind),
            )
            self.pages.append(page)
            self.files[page.path] = (self._html(rng, page, index, pages), _HTML)

    def _html(self, rng: random.Random, page: Page, index: int, pages: int) -> bytes:
        head = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(page.title)}</title>\n'
            '<meta name="viewport" content="width=device-width,initial-scale=1">\n'
            '<link rel="stylesheet" href="/static/site.css">\n'
        )
        if page.kind in JS_KINDS:
            mount = "root" if page.kind == INLINE else "app"
            data = {"mount": mount, "title": page.title, "paragraphs": list(page.paragraphs)}
            if page.kind == INLINE:
                start = f"render({_script_json(data)});"
            else:
                data_path = f"/api/pages/{index:04d}.json"
                self.files[data_path] = (json.dumps(data).encode(), "application/json")
                start = f"fetch('{data_path}').then(function(r){{return r.json();}}).then(render);"
            body = f'<body><div id="{mount}"></div>\n<script>{_RENDER_JS}\n{start}</script>\n</body></html>\n'
            return (head + "</head>\n" + body).encode()
        links = "".join(
            f'<li><a href="/docs/page-{rng.randrange(pages):04d}.html">{escape(topic)}</a></li>' for topic in _TOPICS
        )
        scripts = ""
        if page.kind == HEAVY:
            # Inline state and analytics, as large as a framework's: the HTML passes 8 KiB, none of it text.
            config = {
                "nav": [{"title": topic, "href": f"/docs/{topic.lower().replace(' ', '-')}/"} for topic in _TOPICS],
                "i18n": {f"label_{n}": _words(rng, 3, 8) for n in range(60)},
                "build": rng.getrandbits(64),
            }
            scripts = (
                f"<script>window.__SITE_CONFIG__={_script_json(config)};</script>\n<script>{_ANALYTICS}</script>\n"
            )
            if index % 2:
                scripts += "<noscript>This site works best with JavaScript enabled.</noscript>\n"
        article = "".join(f"<p>{escape(paragraph)}</p>\n" for paragraph in page.paragraphs)
        body = (
            f'<body>\n<header><a class="logo" href="/">Bench Docs</a><nav><ul>{links}</ul></nav></header>\n'
            f"<main><article><h1>{escape(page.title)}</h1>\n{article}</article></main>\n"
            f"<footer><p>Copyright Bench Docs.</p><ul>{links}</ul></footer>\n{scripts}</body></html>\n"
        )
        return (head + "</head>\n" + body).encode()

    def sizes(self, kind: str) -> list[int]:
        return sorted(len(self.files[page.path][0]) for page in self.pages if page.kind == kind)

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for page in self.pages:
            counts[page.kind] = counts.get(page.kind, 0) + 1
        return counts


def _kind(index: int, *, js: bool) -> str:
    if js and index % JS_EVERY == JS_EVERY - 1:
        return INLINE if index // JS_EVERY % 2 == 0 else FETCH
    return HEAVY if index % HEAVY_EVERY == 0 else STATIC


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(low, high)))


def _sentence(rng: random.Random) -> str:
    text = _words(rng, 8, 22)
    return text[0].upper() + text[1:] + "."


def _paragraphs(rng: random.Random, index: int, kind: str) -> tuple[str, ...]:
    """A few KiB of paragraphs; the first opens with the marker sentence (unique: it names the page)."""
    marker = f"Page {index} of the render bench is {kind} and says {_words(rng, 4, 6)}."
    paragraphs = [" ".join(_sentence(rng) for _ in range(rng.randint(3, 7))) for _ in range(rng.randint(4, 10))]
    paragraphs[0] = f"{marker} {paragraphs[0]}"
    return tuple(paragraphs)


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value).replace("</", "<\\/")


class SiteServer:
    """`site` served by a ThreadingHTTPServer (HTTP/1.1 keep-alive) on a free port of 127.0.0.1, in threads of
    this process; the crawls it serves run in other processes."""

    def __init__(self, site: Site) -> None:
        files = site.files

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                found = files.get(path)
                # The analytics beacon is answered as analytics endpoints do: 204, nothing to read.
                status = 200 if found else 204 if path == "/collect" else 404
                body, content_type = found or (b"", "text/plain")
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="render-site", daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def kib(sizes: list[int]) -> str:
    """min / median / max of `sizes` in KiB."""
    if not sizes:
        return "-"
    return f"{sizes[0] / KiB:.1f} / {sizes[len(sizes) // 2] / KiB:.1f} / {sizes[-1] / KiB:.1f} KiB"
