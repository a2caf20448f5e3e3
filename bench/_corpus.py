"""Shared parts of the crawl benches: a seeded corpus of documentation-like pages, a keep-alive
HTTP/1.1 server for it in its own process, and an embedded stack that materializes `crawl_results`.

Run as a script (`_corpus.py serve ROOT PORT`) it is the server: uvicorn (httptools, uvloop) over a
raw ASGI app that answers from memory with ETag and Last-Modified and honours conditional requests.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from hashlib import sha256
from html import escape
from pathlib import Path
from typing import Any

KiB = 1024
MiB = 1024 * KiB
ROBOTS_TXT = b"User-agent: *\nAllow: /\n"
# One fixed modification time, so Last-Modified is the same on every run of a bench.
LAST_MODIFIED = formatdate(1_700_000_000, usegmt=True)

_WORDS = (
    "pipeline asset partition sensor schedule resource executor worker queue broker cluster node "
    "replica shard index document folder workspace connector crawler request response header body "
    "timeout retry backoff cache token session account credit ledger charge invoice usage quota "
    "limit window buffer stream chunk record line field column table schema migration revision "
    "engine driver pool connection socket address network gateway proxy certificate handshake "
    "cipher digest signature secret key value store bucket object prefix upload download mirror "
    "snapshot backup restore replay event cursor offset watermark checkpoint job task step run "
    "launcher daemon webserver console dashboard metric gauge counter histogram trace span log "
    "level handler formatter filter policy rule guard check validation error warning failure "
    "status code message payload format encoding charset language locale timezone calendar cron "
    "interval deadline lease lock owner renewal expiry release handoff consumer producer topic "
    "subscription webhook delivery endpoint route path query parameter argument option flag "
    "default override environment variable setting profile deployment release version tag branch "
    "commit build artifact image container volume mount permission role scope grant audit "
    "the a an of to in for on with by from at as is are be can will may should must not and or "
    "each every when then while after before until unless only also still already often rarely "
    "configure create delete update read write fetch parse extract normalize compare merge split "
    "join sort filter map reduce collect emit publish subscribe acknowledge reject accept refuse "
    "allow deny enable disable start stop pause resume cancel schedule trigger launch monitor "
    "quickly safely reliably eventually exactly approximately automatically manually explicitly"
).split()
_TOPICS = (
    "Getting started", "Installation", "Configuration reference", "Authentication", "Rate limits",
    "Webhooks", "Scheduling runs", "Partitions", "Retries and backoff", "Storage backends",
    "Monitoring", "Troubleshooting", "Upgrading", "Security model", "Billing", "Command line",
    "HTTP API", "Data model", "Migrations", "Deployment", "Concurrency", "Caching", "Logging",
)
_LANGUAGES = ("python", "bash", "yaml", "json", "sql")


class _Page:
    """One seeded documentation page built up as a list of HTML fragments."""

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

    def section(self, number: int) -> str:
        rng = self.rng
        parts = [f'<h2 id="s{number}">{number}. {self.words(2, 5).capitalize()}</h2>\n']
        for sub in range(rng.randint(1, 3)):
            if sub:
                parts.append(f"<h3>{number}.{sub} {self.words(2, 4).capitalize()}</h3>\n")
            parts.extend(self.paragraph() for _ in range(rng.randint(1, 3)))
            roll = rng.random()
            if roll < 0.35:
                parts.append(self.listing())
            elif roll < 0.55:
                parts.append(self.table())
            elif roll < 0.75:
                parts.append(self.code())
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


def corpus_stats(root: Path) -> tuple[int, int, int]:
    """(pages, smallest page in bytes, total bytes) of a written corpus."""
    sizes = [entry.stat().st_size for entry in (root / "docs").iterdir()]
    return len(sizes), min(sizes), sum(sizes)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class CorpusServer:
    """The corpus served by `_corpus.py serve` in a child process on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def __enter__(self) -> CorpusServer:
        command = [sys.executable, str(Path(__file__).resolve()), "serve", str(self.root), str(self.port)]
        self._process = subprocess.Popen(command)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SystemExit(f"the corpus server exited with code {self._process.returncode}")
            try:
                urllib.request.urlopen(self.url("/robots.txt"), timeout=1).close()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.__exit__()
        raise SystemExit("the corpus server did not answer within 60 s")

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


def _serve(root: Path, port: int) -> None:
    import uvicorn

    last_modified_at = parsedate_to_datetime(LAST_MODIFIED)
    last_modified = LAST_MODIFIED.encode("ascii")
    files: dict[str, tuple[bytes, bytes]] = {"/robots.txt": (ROBOTS_TXT, b'"robots"')}
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
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", b"9")]})
            await send({"type": "http.response.body", "body": b"not found"})
            return
        body, etag = found
        headers = [(b"etag", etag), (b"last-modified", last_modified)]
        if not_modified(dict(scope["headers"]), etag):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        content_type = b"text/plain" if scope["path"] == "/robots.txt" else b"text/html; charset=utf-8"
        headers += [(b"content-type", content_type), (b"content-length", str(len(body)).encode("ascii"))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", lifespan="off",
                access_log=False, log_level="warning", timeout_keep_alive=30, backlog=1024)


class TreeSampler:
    """Samples a process and its descendants in a thread: peak RSS (main process, descendants, and
    their sum at one instant) and CPU seconds used, plus what every other process on the machine used.

    A descendant that exits between samples loses at most one interval of CPU time.
    """

    def __init__(self, pid: int | None = None, *, also: tuple[int, ...] = (), interval: float = 0.05) -> None:
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(pid or os.getpid())
        # Processes whose CPU counts as ours but whose memory does not (the corpus server).
        self._also = [psutil.Process(extra) for extra in also]
        self._interval = interval
        self._cpu: dict[int, float] = {}
        self._start_cpu: dict[int, float] = {}
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
        for process in [*self._processes(), *self._also]:
            try:
                with process.oneshot():
                    rss = process.memory_info().rss
                    times = process.cpu_times()
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                continue
            self._cpu[process.pid] = times.user + times.system
            if process in self._also:
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
        self._start_cpu = dict(self._cpu)
        self._machine_start = self._psutil.cpu_times()
        self._wall_start = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.wall = time.perf_counter() - self._wall_start
        machine = self._psutil.cpu_times()
        busy = sum(getattr(machine, f) - getattr(self._machine_start, f) for f in ("user", "system", "nice"))
        self.cpu = sum(seconds - self._start_cpu.get(pid, 0.0) for pid, seconds in self._cpu.items())
        # Everything else the machine ran meanwhile, as a share of all its cores over the phase.
        self.others_share = max(0.0, busy - self.cpu) / (self.wall * (os.cpu_count() or 1))


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

        from pipelines_dagster.app_db.engine import create_engine
        from pipelines_dagster.app_db.migrate import upgrade

        self.dir = Path(self._exit.enter_context(tempfile.TemporaryDirectory(prefix="crawl-bench-")))
        self.engine = create_engine(f"sqlite:///{self.dir / 'app.sqlite3'}")
        self._exit.callback(self.engine.dispose)
        upgrade(self.engine)
        (self.dir / "dagster").mkdir()
        self.instance = self._exit.enter_context(dg.instance_for_test(temp_dir=str(self.dir / "dagster")))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._exit.close()

    def warm_up(self) -> None:
        """Pay this process's one-off costs of a first Dagster run (imports, storage set-up) before
        measuring: a disabled pipeline is refused by the asset's first guard, before any crawl."""
        self.materialize(*self.pipeline(["http://127.0.0.1:9/"], name="warm-up", enabled=False), log_level="CRITICAL")

    def resources(self) -> dict[str, Any]:
        from pipelines_dagster.resources.app_db import AppDatabaseResource
        from pipelines_dagster.resources.billing import BillingResource
        from pipelines_dagster.resources.blob_store import LocalBlobStoreResource
        from pipelines_dagster.resources.crawler import CrawlerResource
        from pipelines_dagster.resources.locks import DatabaseLocksResource

        url = self.engine.url.render_as_string(hide_password=False)
        app_db = AppDatabaseResource(url=url)
        return {
            "app_db": app_db,
            "blob_store": LocalBlobStoreResource(root=str(self.dir / "blobs")),
            "locks": DatabaseLocksResource(database_url=url),
            "crawler": CrawlerResource(allowed_networks=["127.0.0.1/32"]),
            "billing": BillingResource(app_db=app_db, billing_enabled=False),
        }

    def pipeline(self, urls: list[str], *, name: str = "bench", enabled: bool = True) -> tuple[int, int]:
        """A workspace with a web connector over `urls` and a raw-crawl pipeline: (workspace id, pipeline id)."""
        from pipelines_dagster import services
        from pipelines_dagster.app_db.engine import session_factory, transaction
        from pipelines_dagster.core import catalog

        with transaction(session_factory(self.engine)) as session:
            workspace = catalog.create_workspace(session, name=name, owner_user_id=f"bench-{uuid.uuid4().hex[:6]}")
            connector = catalog.create_connector(
                session, workspace_id=workspace.workspace.id, connector_type="webcrawler", urls=urls
            )
            pipeline = services.create_pipeline(
                session, self.instance, workspace_id=workspace.workspace.id, connector_id=connector.id,
                name=name, save_to_kb=False, enabled=enabled,
            )
            return workspace.workspace.id, pipeline.id

    def materialize(self, workspace_id: int, pipeline_id: int, *, log_level: str = "WARNING") -> Materialized:
        """Materialize `crawl_results` for the pipeline in-process and time the whole call."""
        import dagster as dg

        from pipelines_dagster.assets.crawl_results import crawl_results
        from pipelines_dagster.jobs import run_tags

        started = time.perf_counter()
        result = dg.materialize(
            [crawl_results],
            partition_key=str(pipeline_id),
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


RESULT_PREFIX = "BENCH-RESULT "


def run_worker(script: Path, arguments: list[str]) -> dict[str, Any]:
    """Run `script` with `arguments` in a fresh Python process and return the JSON it reports.

    The worker's output passes through; its result is the line starting with RESULT_PREFIX.
    """
    completed = subprocess.run([sys.executable, str(script), *arguments], stdout=subprocess.PIPE, text=True)
    result = None
    for line in completed.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
        else:
            print(line)
    if completed.returncode != 0 or result is None:
        raise SystemExit(f"the bench worker {script.name} {' '.join(arguments)} failed (exit {completed.returncode})")
    return result


def report_result(result: dict[str, Any]) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


@contextmanager
def served_corpus(
    *, pages: int, min_bytes: int, seed: int, spread: int = 0
) -> Iterator[tuple[CorpusServer, list[str]]]:
    """A freshly written corpus in a temporary directory, served; yields the server and the page URLs."""
    with tempfile.TemporaryDirectory(prefix="crawl-corpus-") as directory:
        root = Path(directory)
        paths = write_corpus(root, pages=pages, min_bytes=min_bytes, seed=seed, spread=spread)
        with CorpusServer(root) as server:
            yield server, [server.url(path) for path in paths]


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        raise SystemExit(f"usage: {Path(sys.argv[0]).name} serve ROOT PORT")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    _serve(Path(sys.argv[2]), int(sys.argv[3]))
