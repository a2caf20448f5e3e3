"""Hostile input: what gzip bombs, a link-heavy page, an oversized sitemap and oversized request headers
cost in memory, each against the same work on plain input (issue 23).

A hostile server runs in its own process on 127.0.0.1 (outside what is measured) and answers:
- `/bomb/N`: a gzip-encoded body that inflates to 1 GiB (1 MiB on the wire); `/plain/N`: 1 GiB of plain
  text, streamed without a length. Both are over the crawler's 5 MiB body cap; the bomb's size shows only
  when it is inflated.
- `/links/`: a 4.4 MiB page with 240,000 links (to `/links/<hex>`, each a small page); `/small/`: a page with
  10 links.
- `/sitemap.xml`: 60 MiB listing five pages under `/maps/` at its start, five at 49 MiB and five at its end,
  XML comments between (in the baseline, the fifteen entries alone), and `/stats`: which were requested.

Each crawl is materialized in a fresh Python process, as `bench/crawl_memory.py` does, with its peak RSS
(the materializing process and its extraction workers, summed at one instant) sampled every 10 ms:
1. 16 bombs and one small page at the crawler's global concurrency (16) against 16 plain bodies and the page.
   Target: peak within 1.5x of the plain crawl's, and every oversized body failed.
2. A site crawl of max 10 pages from `/links/` against the same crawl from `/small/`. Target: the link page
   costs at most 300 MB of peak RSS more (the stack alone, Dagster and two extraction workers, takes ~300 MB).
3. A site crawl from `/maps/` (a page without links) with the 60 MiB sitemap against the same crawl with the
   small one. Target: the sitemap read to its 50 MiB cap and no further: the pages listed before the cap
   crawled, those after it not.
4. `pipelines-dagster api` on the embedded default, in its own process: its idle RSS, then its peak RSS while
   8 clients at once each send a request with a 64 MiB Authorization header. Target: peak within 50 MB of
   idle, and the API still answering.

`--smoke` does the same with 2 bombs of 64 MiB, a 5,000-link page, a 6 MB sitemap (over the page cap, under
the sitemap cap: read whole) and 2 clients with 4 MiB headers: it prints the same figures and exits 1 only
when something did not work, whatever the memory.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _corpus import BIN, EmbeddedHome, EmbeddedStack, MiB, ServerProcess, TreeSampler, report_result, run_worker

MB = 1000 * 1000
SITEMAP_CAP = 50 * MiB
SITE_PAGES = 10
PAGE = b"<html><head><title>Fine</title></head><body><main><h1>A page</h1><p>%s</p></main></body></html>"


@dataclass(frozen=True)
class Sizes:
    bombs: int
    bomb_bytes: int
    links: int
    sitemap_bytes: int
    clients: int
    header_bytes: int


FULL = Sizes(bombs=16, bomb_bytes=1024 * MiB, links=240_000, sitemap_bytes=60 * MiB, clients=8, header_bytes=64 * MiB)
SMOKE = Sizes(bombs=2, bomb_bytes=64 * MiB, links=5_000, sitemap_bytes=6 * MB, clients=2, header_bytes=4 * MiB)


def gzip_bomb(size: int) -> bytes:
    """`size` bytes of spaces after an HTML start, gzip-compressed (about 1/1000 of `size`)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(b"<html><body><p>")]
    block = b" " * MiB
    parts += [packer.compress(block) for _ in range(size // MiB)]
    return b"".join(parts) + packer.flush()


GROUP_PAGES = 5
MAPS_PAGES = 1 + 3 * GROUP_PAGES  # the start page and every page the sitemap lists


def sitemap_group(group: str) -> bytes:
    return b"".join(b"<url><loc>/maps/%s%d</loc></url>" % (group.encode(), index) for index in range(GROUP_PAGES))


def sitemap(size: int) -> bytes:
    """A <urlset> of `size` bytes listing pages in three groups: /maps/a* first; /maps/b* past the page cap
    and before the sitemap cap; /maps/c* at the end (past the sitemap cap when `size` is). XML comments
    fill the space between, as the whitespace of a large generated sitemap would, without entries that
    count against max pages. A `size` of 0: the three groups alone."""
    head = b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    body = bytearray(head + sitemap_group("a"))
    for group, at in (("b", min(size - MiB // 5, SITEMAP_CAP - MiB)), ("c", size - MiB // 10)):
        comment = b"<!--" + b" " * (64 * 1024 - 7) + b"-->"  # lxml refuses a text node over 10 MB
        body += comment * max(0, (at - len(body)) // len(comment))
        body += sitemap_group(group)
    return bytes(body + b"</urlset>")


def hostile_app(sizes: Sizes, sitemap_bytes: int) -> Any:
    bomb = gzip_bomb(sizes.bomb_bytes)
    links = b"<html><body><main><h1>Links</h1><p>Many links.</p>" + b"".join(
        b"<a href=%x>a</a>" % index for index in range(sizes.links)
    )
    small = b"<html><body><main><h1>Links</h1><p>Few links.</p>" + b"".join(
        b"<a href=%x>a</a>" % index for index in range(SITE_PAGES)
    )
    maps = sitemap(sitemap_bytes)
    sent = {"sitemap": 0}
    groups: dict[str, int] = {"a": 0, "b": 0, "c": 0}
    chunk = b"a" * (64 * 1024)

    async def respond(send: Any, status: int, body: bytes, content_type: bytes, *extra: tuple[bytes, bytes]) -> None:
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path == "/robots.txt":
            await respond(send, 200, b"User-agent: *\nAllow: /\n", b"text/plain")
        elif path.startswith("/bomb/"):
            await respond(send, 200, bomb, b"text/html", (b"content-encoding", b"gzip"))
        elif path.startswith("/plain/"):
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
            for _ in range(sizes.bomb_bytes // len(chunk)):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/links/":
            await respond(send, 200, links, b"text/html")
        elif path == "/small/":
            await respond(send, 200, small, b"text/html")
        elif path == "/sitemap.xml":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/xml")]})
            for start in range(0, len(maps), 1024 * 1024):
                part = maps[start : start + 1024 * 1024]
                await send({"type": "http.response.body", "body": part, "more_body": True})
                sent["sitemap"] += len(part)
            await send({"type": "http.response.body", "body": b""})
        elif path == "/stats":
            await respond(send, 200, json.dumps({**sent, "groups": groups}).encode(), b"application/json")
        elif path.startswith(("/ok/", "/links/", "/small/", "/maps/")):
            if path.startswith("/maps/") and path[6:7] in groups:
                groups[path[6:7]] += 1
            await respond(send, 200, PAGE % path.encode(), b"text/html; charset=utf-8")
        else:
            await respond(send, 404, b"not found", b"text/plain")

    return app


class HostileServer(ServerProcess):
    name = "hostile server"

    def __init__(self, *, smoke: bool, sitemap_bytes: int = 0) -> None:
        mode = "--smoke" if smoke else "--full"
        super().__init__(
            [sys.executable, str(Path(__file__).resolve()), "serve", mode, str(sitemap_bytes)], ready_path="/ok/ready"
        )

    def stats(self) -> dict[str, Any]:
        """Bytes of /sitemap.xml sent, and requests for each group of the pages it lists."""
        with urllib.request.urlopen(self.url("/stats"), timeout=10) as answer:
            return dict(json.loads(answer.read()))


class HostileStack(EmbeddedStack):
    """The embedded stack with every one of the crawl's 16 requests allowed onto the one hostile host."""

    def resources(self) -> dict[str, Any]:
        from pipelines_dagster.resources.crawler import CrawlerResource
        from pipelines_dagster.resources.network import NetworkAccess

        return super().resources() | {
            "crawler": CrawlerResource(
                network=NetworkAccess(allowed_networks=["127.0.0.1/32"]), per_host_concurrency=16, max_attempts=1
            )
        }


def crawl(base_url: str, kind: str, sizes: Sizes) -> dict[str, Any]:
    """One sampled crawl in this process; `kind` is bombs, plain, links, small or maps."""
    from pipelines_dagster.core.crawl.site.config import SiteConfig

    with HostileStack() as stack:
        stack.warm_up()
        if kind in ("bombs", "plain"):
            prefix = "/bomb/" if kind == "bombs" else "/plain/"
            urls = [f"{base_url}/ok/0"] + [f"{base_url}{prefix}{index}" for index in range(sizes.bombs)]
            workspace_id, pipeline_id = stack.pipeline(urls)
        else:
            start = {"links": "/links/", "small": "/small/", "maps": "/maps/"}[kind]
            pages = MAPS_PAGES if kind == "maps" else SITE_PAGES
            site = SiteConfig.validated(
                start_urls=[base_url + start], max_pages=pages, max_depth=1, include=[start + "**"]
            )
            workspace_id, pipeline_id = stack.pipeline([], site=site)
        with TreeSampler(interval=0.01) as sampler:
            run = stack.materialize(workspace_id, pipeline_id, log_level="CRITICAL")
    metadata = run.metadata
    return {
        "kind": kind,
        "seconds": sampler.wall,
        "succeeded": metadata.get("urls_succeeded"),
        "failed": metadata.get("urls_failed"),
        "discovered": metadata.get("pages_discovered"),
        "sitemaps_truncated": metadata.get("sitemaps_truncated"),
        "sitemaps_skipped": metadata.get("sitemaps_skipped"),
        "links_capped": metadata.get("pages_links_capped"),
        "peak_total": sampler.peak_total,
        "peak_main": sampler.peak_main,
        "peak_children": sampler.peak_children,
    }


def send_huge_header(port: int, size: int) -> str:
    """A GET whose Authorization header is `size` bytes, sent in 1 MiB writes: the status line the server
    answered with, or how the connection ended."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        try:
            sock.sendall(b"GET /workspaces/1/pipelines HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ")
            block = b"a" * MiB
            for _ in range(size // MiB):
                sock.sendall(block)
            sock.sendall(b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole header arrived: what the limit is for
        try:
            answer = sock.recv(4096)
        except (ConnectionResetError, TimeoutError) as exc:
            return f"no answer ({type(exc).__name__})"
    return answer.split(b"\r\n", 1)[0].decode("latin-1") or "closed without an answer"


def api_headers(sizes: Sizes) -> dict[str, Any]:
    """The API's idle and peak RSS while `sizes.clients` clients send `sizes.header_bytes` headers at once."""
    with EmbeddedHome():
        command = [str(BIN / "pipelines-dagster"), "api", "--host", "127.0.0.1", "--port"]
        with ServerProcess(command, ready_path="/openapi.json") as api:
            for _ in range(5):
                urllib.request.urlopen(api.url("/openapi.json"), timeout=30).close()
            time.sleep(1)
            with TreeSampler(api.pid, interval=0.5) as idle:
                time.sleep(2)
            answers: list[str] = []
            clients = [
                threading.Thread(target=lambda: answers.append(send_huge_header(api.port, sizes.header_bytes)))
                for _ in range(sizes.clients)
            ]
            with TreeSampler(api.pid, interval=0.01) as loaded:
                for client in clients:
                    client.start()
                for client in clients:
                    client.join()
            with urllib.request.urlopen(api.url("/openapi.json"), timeout=30) as after:
                still_answers = after.status == 200
    return {
        "idle": idle.peak_main,
        "peak": loaded.peak_main,
        "seconds": loaded.wall,
        "answers": sorted(answers),
        "still_answers": still_answers,
    }


def mib(value: int) -> str:
    return f"{value / MiB:.1f} MiB"


def show(result: dict[str, Any]) -> None:
    print(
        f"  {result['kind']:>6}: {result['seconds']:5.1f} s, {result['succeeded']} succeeded, {result['failed']} "
        f"failed, {result['discovered']} discovered; peak RSS {mib(result['peak_total'])} (materializing process "
        f"{mib(result['peak_main'])}, extraction workers {mib(result['peak_children'])})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; exit 1 only when something did not work")
    parser.add_argument("--worker", nargs=2, metavar=("BASE_URL", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = SMOKE if args.smoke else FULL
    flag = ["--smoke"] if args.smoke else []
    if args.worker:
        base_url, kind = args.worker
        report_result(api_headers(sizes) if kind == "api" else crawl(base_url, kind, sizes))
        return 0
    me = Path(__file__)
    failures: list[str] = []

    def judge(ok: bool, what: str, *, memory: bool = False) -> str:
        if ok or (memory and args.smoke):
            return "not judged (smoke)" if memory and args.smoke else "meets the target"
        failures.append(what)
        return "MISSES the target"

    with HostileServer(smoke=args.smoke) as server:
        print(f"1. {sizes.bombs} gzip bombs of {mib(sizes.bomb_bytes)} against {sizes.bombs} plain bodies as large")
        bombs, plain = (run_worker(me, [*flag, "--worker", server.url(""), kind]) for kind in ("bombs", "plain"))
        for result in (bombs, plain):
            show(result)
            if (result["succeeded"], result["failed"]) != (1, sizes.bombs):
                failures.append(f"the {result['kind']} crawl: expected 1 page and {sizes.bombs} refused bodies")
        ratio = bombs["peak_total"] / plain["peak_total"]
        print(f"  bombs / plain peak RSS = {ratio:.2f}x (target <= 1.5x): {judge(ratio <= 1.5, 'bombs', memory=True)}")

        print(f"2. a site crawl of {SITE_PAGES} pages from a page of {sizes.links:,} links, and from one of 10")
        links, small = (run_worker(me, [*flag, "--worker", server.url(""), kind]) for kind in ("links", "small"))
        for result in (links, small):
            show(result)
            if result["succeeded"] != SITE_PAGES:
                failures.append(f"the {result['kind']} crawl: expected {SITE_PAGES} pages crawled")
        extra = links["peak_total"] - small["peak_total"]
        print(
            f"  the link page costs +{mib(extra)} of peak RSS over the 10-link page (target <= 300 MB): "
            f"{judge(extra <= 300 * MB, 'links', memory=True)}"
        )

    print(
        f"3. a site crawl from a page without links whose sitemap is {mib(sizes.sitemap_bytes)} (pages listed at its "
        f"start, at {mib(min(sizes.sitemap_bytes - MiB // 5, SITEMAP_CAP - MiB))} and at its end), and the same "
        "sitemap without the space between"
    )
    results = {}
    for name, sitemap_bytes in (("large", sizes.sitemap_bytes), ("small", 0)):
        with HostileServer(smoke=args.smoke, sitemap_bytes=sitemap_bytes) as server:
            results[name] = run_worker(me, [*flag, "--worker", server.url(""), "maps"])
            results[name] |= {"kind": name, **server.stats()}
    for result in results.values():
        show(result)
        print(
            f"          sitemap bytes sent {mib(result['sitemap'])}; pages requested of each group listed "
            f"{result['groups']}; sitemaps cut at their cap: {result['sitemaps_truncated']}, skipped: "
            f"{result['sitemaps_skipped']}"
        )
    big, small = results["large"], results["small"]
    past_cap = sizes.sitemap_bytes > SITEMAP_CAP
    # What the crawler read is told by the pages it then requested (the bytes the server sent include what
    # the crawler's receive buffer, up to 32 MiB on loopback here, took after it stopped reading).
    expected = {"a": GROUP_PAGES, "b": GROUP_PAGES, "c": 0 if past_cap else GROUP_PAGES}
    read_to_cap = big["groups"] == expected and big["sitemaps_truncated"] == int(past_cap)
    if small["groups"] != {"a": GROUP_PAGES, "b": GROUP_PAGES, "c": GROUP_PAGES}:
        failures.append("the small sitemap crawl: expected every page it lists")
    extra = big["peak_total"] - small["peak_total"]
    print(
        f"  the large sitemap read past the page cap to {'its cap and no further' if past_cap else 'its end'}: "
        f"{judge(read_to_cap, 'sitemap read')}; it costs +{mib(extra)} of peak RSS over the small one"
    )

    print(f"4. the API while {sizes.clients} clients at once send {mib(sizes.header_bytes)} Authorization headers")
    api = run_worker(me, [*flag, "--worker", "-", "api"])
    growth = api["peak"] - api["idle"]
    print(
        f"  idle RSS {mib(api['idle'])}, peak {mib(api['peak'])} (+{mib(growth)}) over {api['seconds']:.1f} s; "
        f"answers: {', '.join(api['answers'])}; still answering: {api['still_answers']}"
    )
    if not api["still_answers"]:
        failures.append("the API stopped answering")
    print(f"  growth (target <= 50 MB): {judge(growth <= 50 * MB, 'headers', memory=True)}")

    print("PASS" if not failures else f"FAIL: {', '.join(failures)}")
    return 0 if not failures else 1


def serve(app: Any, port: int) -> None:
    """`app` on 127.0.0.1 with a small send buffer per connection, so what the server counts as sent is
    within about 0.2 MiB of what left it (the crawler's receive buffer may still hold a few MiB)."""
    import uvicorn

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # accepted connections inherit it
    listener.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, http="httptools", lifespan="off", access_log=False, log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "serve":
        serve(hostile_app(SMOKE if sys.argv[2] == "--smoke" else FULL, int(sys.argv[3])), int(sys.argv[4]))
    else:
        sys.exit(main())
