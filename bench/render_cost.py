"""Render cost (issue 27, item 6): what rendering pages in the guarded headless browser finds and costs, for a
crawl with render = never, auto and always.

The site (`_render_site.Site`, 200 pages, served from memory by a threaded HTTP server on 127.0.0.1 in this
process): a quarter of its pages are JS-only, half of those writing their text with an inline script into an
empty `<div id="root">`, half fetch()ing it as JSON from the same site; the rest are static articles of a few
KiB (navigation, paragraphs, footer), one in three of them over 8 KiB with inline site config and analytics
scripts that carry none of the text, so `auto`'s large-HTML branch meets pages it must leave alone. A second
site has the same static pages and no JS page at all. Every page's text opens with a marker sentence that
names it: a page's text is found when its crawl's extracted content holds its marker (and its characters
found are those of its paragraphs found whole).

Each crawl runs in a fresh Python process on a fresh `Crawler` (the crawler's own defaults, loopback allowed
in its network policy); its wall time runs from creating the crawler to closing it (extraction workers and
browser started and stopped included), and a thread there samples every 50 ms the memory of the process
tree (the crawl process, its extraction workers, the Playwright driver and the browser's processes): the
sum of RSS (which counts a page shared by Chromium's processes once per process) and of PSS (shared pages
split between their processes; what `render.processes.tree_memory` counts), peak of each. A throwaway
crawl first warms the disk cache (Chromium's binary, the Python imports); then each round runs the five
crawls in an order rotated by one each round. The fastest round of each crawl counts, as in the other crawl
benches: other work on a shared machine only ever slows a round down (each crawl says how busy the rest of the
machine was meanwhile); the median is printed beside it.

Targets: `auto` finds >= 98 % of the text `always` finds, in <= 0.4 x `always`'s wall time; on the no-JS site,
`auto`'s wall time <= 1.1 x `never`'s. Exits 1 when a target is missed or a correctness check fails (a crawl
that fails a page, `always` missing a page's text, `never` finding a JS-only page's text, a static page
rendered under `auto`).

`--smoke`: one round over 16-page sites, no warm-up; the same figures and checks, the targets not judged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _corpus import MiB, OtherLoad, report_result, run_worker
from _render_site import JS_KINDS, KINDS, Site, SiteServer, found_in, kib

from pipelines_dagster.core.crawl.crawler import Crawler
from pipelines_dagster.core.crawl.render.processes import tree
from pipelines_dagster.core.crawl.render.rule import RenderMode
from pipelines_dagster.core.crawl.types import CrawlerConfig
from pipelines_dagster.core.security.network_policy import NetworkPolicy

SEED = 20261206
PAGES, SMOKE_PAGES, WARM_UP_PAGES = 200, 16, 16
ROUNDS = 3
FOUND_TARGET, AUTO_WALL_TARGET, NO_JS_TARGET = 0.98, 0.4, 1.1
SAMPLE_SECONDS = 0.05
# A crawl during which the rest of the machine kept more than this share of its cores busy is flagged.
BUSY_WARNING = 0.10
JS_SITE, NO_JS_SITE = "js", "no-js"
CRAWLS = (
    (JS_SITE, RenderMode.NEVER),
    (JS_SITE, RenderMode.AUTO),
    (JS_SITE, RenderMode.ALWAYS),
    (NO_JS_SITE, RenderMode.NEVER),
    (NO_JS_SITE, RenderMode.AUTO),
)


# -- in the crawl process ---------------------------------------------------------------------------


class TreePeak:
    """Peak memory of this process and every process under it, sampled from /proc in a thread: the sum of RSS
    and the sum of PSS at one instant (both from /proc/PID/smaps_rollup, one pass per process)."""

    def __init__(self, *, interval: float = SAMPLE_SECONDS) -> None:
        self.rss = self.pss = self.processes = 0
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-peak", daemon=True)

    def _sample(self) -> None:
        rss = pss = 0
        pids = tree(os.getpid())
        for pid in pids:
            # A process that ended since the listing holds nothing.
            with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
        self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
        self.processes = max(self.processes, len(pids))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> TreePeak:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


async def crawl(crawler: Crawler, urls: list[str], mode: RenderMode) -> list[Any]:
    return [outcome async for outcome in crawler.crawl(urls, render=mode)]


def measure(base_url: str, *, site_name: str, mode: RenderMode, pages: int) -> dict[str, Any]:
    """Crawl the site at `base_url` (rebuilt here from the seed, to know each page's text) with `mode` on a
    fresh Crawler: wall time, peak memory, what was rendered, and what each kind of page had found."""
    site = Site(pages=pages, seed=SEED, js=site_name == JS_SITE)
    by_url = {base_url + page.path: page for page in site.pages}
    config = CrawlerConfig(network=NetworkPolicy(allowed_networks=("127.0.0.1/32",)))
    with TreePeak() as peak:
        started = time.perf_counter()
        with Crawler(config) as crawler:
            outcomes = asyncio.run(crawl(crawler, list(by_url), mode))
        wall = time.perf_counter() - started
    kinds: dict[str, dict[str, int]] = {}
    missed = []
    for outcome in outcomes:
        page = by_url[outcome.url]
        found = found_in(page, outcome.content)
        if not found.marker and not (mode is RenderMode.NEVER and page.kind in JS_KINDS):
            missed.append(f"{page.path} ({page.kind}, {outcome.status}: {outcome.error or 'text without its marker'})")
        counts = kinds.setdefault(page.kind, Counter(pages=0, found=0, chars=0, chars_of=0, rendered=0))
        counts.update(
            pages=1,
            found=found.marker,
            chars=found.chars,
            chars_of=sum(map(len, page.paragraphs)),
            rendered=outcome.rendered,
        )
    return {
        "wall": wall,
        "outcomes": len(outcomes),
        "statuses": Counter(outcome.status for outcome in outcomes),
        "errors": sorted({f"{outcome.status}: {outcome.error}" for outcome in outcomes if outcome.status == "failed"}),
        "kinds": kinds,
        "missed": sorted(missed),
        "rendered": sum(outcome.rendered for outcome in outcomes),
        "render_seconds": sum(outcome.render_seconds for outcome in outcomes),
        "peak_rss": peak.rss,
        "peak_pss": peak.pss,
        "processes": peak.processes,
        "render_pages": config.render_pages,
        "render_timeout": config.render_timeout,
    }


# -- the bench --------------------------------------------------------------------------------------


def total(result: dict[str, Any], field: str, *, kinds: tuple[str, ...] | None = None) -> int:
    return sum(counts[field] for kind, counts in result["kinds"].items() if kinds is None or kind in kinds)


def run_crawl(server: SiteServer, site_name: str, mode: RenderMode, pages: int) -> dict[str, Any]:
    """One crawl in a fresh process, and how busy the rest of the machine was meanwhile."""
    arguments = ["--worker", site_name, mode.value, server.url(""), str(pages)]
    with OtherLoad() as load:
        result = run_worker(Path(__file__), arguments)
    return {**result, "others": load.share}


def median_of(results: list[dict[str, Any]], field: str) -> float:
    return statistics.median(result[field] for result in results)


def table(rows: list[tuple[str, list[str]]], heads: list[str]) -> None:
    width = max(len(name) for name, _ in rows)
    print(" " * width + "".join(f"  {head:>20}" for head in heads))
    for name, cells in rows:
        print(f"{name:<{width}}" + "".join(f"  {cell:>20}" for cell in cells))


def side_by_side(runs: dict[tuple[str, RenderMode], list[dict[str, Any]]]) -> None:
    """The figures of each crawl in a column: counts and render time of its fastest round, peak memory as the
    median of its rounds."""
    heads = [f"{site} / {mode}" for site, mode in CRAWLS]
    columns = [runs[crawl] for crawl in CRAWLS]
    fastest = [min(results, key=lambda result: result["wall"]) for results in columns]

    def pages_found(result: dict[str, Any], kinds: tuple[str, ...] | None = None) -> str:
        return f"{total(result, 'found', kinds=kinds)}/{total(result, 'pages', kinds=kinds)}"

    rows = [
        ("pages whose text was found", [pages_found(result) for result in fastest]),
        (
            "  of them JS-only",
            [
                pages_found(result, JS_KINDS) if site == JS_SITE else "-"
                for result, (site, _) in zip(fastest, CRAWLS, strict=True)
            ],
        ),
        (
            "characters of text found",
            [f"{total(result, 'chars'):,} of {total(result, 'chars_of'):,}" for result in fastest],
        ),
        (f"wall time, fastest of {len(columns[0])}", [f"{result['wall']:.2f} s" for result in fastest]),
        ("  median", [f"{median_of(results, 'wall'):.2f} s" for results in columns]),
        ("  each round, s", [" ".join(f"{result['wall']:.1f}" for result in results) for results in columns]),
        ("  rest of machine busy*", [" ".join(f"{result['others']:.0%}" for result in results) for results in columns]),
        ("pages rendered", [str(result["rendered"]) for result in fastest]),
        ("render time, sum over pages", [f"{result['render_seconds']:.1f} s" for result in fastest]),
        ("peak RSS, process tree (sum)", [f"{median_of(results, 'peak_rss') / MiB:.0f} MiB" for results in columns]),
        ("peak PSS, process tree (sum)", [f"{median_of(results, 'peak_pss') / MiB:.0f} MiB" for results in columns]),
        ("processes in the tree, most", [str(max(result["processes"] for result in results)) for results in columns]),
    ]
    table(rows, heads)


def checks(runs: dict[tuple[str, RenderMode], list[dict[str, Any]]]) -> list[str]:
    """What must hold in every round whatever the speed: every page crawled and none failed, `never` renders
    nothing and finds no JS-only page's text, `always` renders and finds every page, `auto` renders no static
    page."""
    failed = []
    for (site, mode), results in runs.items():
        for number, result in enumerate(results, 1):
            name = f"{site} site, render={mode}, round {number}"
            pages = total(result, "pages")
            if result["outcomes"] != pages or result["statuses"].get("failed"):
                failed.append(f"{name}: {result['statuses']} over {pages} pages; {result['errors'][:3]}")
            static = tuple(kind for kind in result["kinds"] if kind not in JS_KINDS)
            if mode is RenderMode.NEVER and (result["rendered"] or total(result, "found", kinds=JS_KINDS)):
                failed.append(
                    f"{name}: rendered {result['rendered']} pages and found the text of "
                    f"{total(result, 'found', kinds=JS_KINDS)} JS-only pages (expected none of either)"
                )
            if mode is RenderMode.ALWAYS and not (result["rendered"] == pages == total(result, "found")):
                failed.append(
                    f"{name}: rendered {result['rendered']} and found the text of {total(result, 'found')} of "
                    f"{pages} pages (expected every page)"
                )
            if mode is not RenderMode.ALWAYS and total(result, "found", kinds=static) != total(
                result, "pages", kinds=static
            ):
                failed.append(
                    f"{name}: found the text of {total(result, 'found', kinds=static)} of "
                    f"{total(result, 'pages', kinds=static)} static pages (expected every one)"
                )
            if mode is RenderMode.AUTO and total(result, "rendered", kinds=static):
                failed.append(
                    f"{name}: rendered {total(result, 'rendered', kinds=static)} static pages (auto must leave "
                    "them as fetched)"
                )
    return failed


def verdict(ok: bool, *, smoke: bool) -> str:
    if smoke:
        return "not judged (smoke)"
    return "meets the target" if ok else "MISSES the target"


def targets(runs: dict[tuple[str, RenderMode], list[dict[str, Any]]], *, smoke: bool) -> bool:
    def chars(site: str, mode: RenderMode) -> int:
        return min(total(result, "chars") for result in runs[site, mode])

    def wall(site: str, mode: RenderMode) -> float:
        return min(result["wall"] for result in runs[site, mode])

    found = chars(JS_SITE, RenderMode.AUTO) / chars(JS_SITE, RenderMode.ALWAYS)
    speed = wall(JS_SITE, RenderMode.AUTO) / wall(JS_SITE, RenderMode.ALWAYS)
    no_js = wall(NO_JS_SITE, RenderMode.AUTO) / wall(NO_JS_SITE, RenderMode.NEVER)
    met = (found >= FOUND_TARGET, speed <= AUTO_WALL_TARGET, no_js <= NO_JS_TARGET)
    print(
        f"text found, auto / always: {chars(JS_SITE, RenderMode.AUTO):,} / {chars(JS_SITE, RenderMode.ALWAYS):,} "
        f"characters = {found:.1%} (target >= {FOUND_TARGET:.0%}): {verdict(met[0], smoke=smoke)}"
    )
    print(
        f"wall time, auto / always: {wall(JS_SITE, RenderMode.AUTO):.2f} s / {wall(JS_SITE, RenderMode.ALWAYS):.2f} s "
        f"= {speed:.2f}x (target <= {AUTO_WALL_TARGET}): {verdict(met[1], smoke=smoke)}"
    )
    print(
        f"no-JS site, wall time auto / never: {wall(NO_JS_SITE, RenderMode.AUTO):.2f} s / "
        f"{wall(NO_JS_SITE, RenderMode.NEVER):.2f} s = {no_js:.2f}x (target <= {NO_JS_TARGET}): "
        f"{verdict(met[2], smoke=smoke)}"
    )
    return smoke or all(met)


def describe(sites: dict[str, Site], servers: dict[str, SiteServer]) -> None:
    for name, site in sites.items():
        print(f"{name} site: {len(site.pages)} pages at {servers[name].url('/docs/')} (ThreadingHTTPServer, HTTP/1.1)")
        for kind, count in site.kinds().items():
            print(f"  {count:4} {KINDS[kind]}: HTML {kib(site.sizes(kind))} (min / median / max)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=PAGES, help=f"pages per site (at least {PAGES})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of the five crawls; the median counts")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"one round over {SMOKE_PAGES}-page sites that proves the bench works: exit 1 only when a correctness "
        "check fails, whatever the targets",
    )
    parser.add_argument("--worker", nargs=4, metavar=("SITE", "MODE", "BASE_URL", "PAGES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        site_name, mode, base_url, pages = args.worker
        report_result(measure(base_url, site_name=site_name, mode=RenderMode(mode), pages=int(pages)))
        return 0
    if args.smoke:
        args.pages, args.rounds = SMOKE_PAGES, 1
    elif args.pages < PAGES:
        parser.error(f"the issue asks for a site of at least {PAGES} pages")

    sites = {name: Site(pages=args.pages, seed=SEED, js=name == JS_SITE) for name in (JS_SITE, NO_JS_SITE)}
    with SiteServer(sites[JS_SITE]) as js_server, SiteServer(sites[NO_JS_SITE]) as no_js_server:
        servers = {JS_SITE: js_server, NO_JS_SITE: no_js_server}
        describe(sites, servers)
        if not args.smoke:
            run_crawl(js_server, JS_SITE, RenderMode.ALWAYS, WARM_UP_PAGES)
        runs: dict[tuple[str, RenderMode], list[dict[str, Any]]] = {crawl: [] for crawl in CRAWLS}
        for number in range(args.rounds):
            shift = number % len(CRAWLS)
            for site_name, mode in CRAWLS[shift:] + CRAWLS[:shift]:
                result = run_crawl(servers[site_name], site_name, mode, args.pages)
                runs[site_name, mode].append(result)
                print(
                    f"round {number + 1}, {site_name} site, render={mode}: {result['wall']:.2f} s, text of "
                    f"{total(result, 'found')}/{total(result, 'pages')} pages, {result['rendered']} rendered  "
                    f"[rest of machine {result['others']:.0%} busy]",
                    flush=True,
                )
                if result["missed"]:
                    print(f"  text not found, of a page the mode should find: {'; '.join(result['missed'][:3])}")
    first = runs[CRAWLS[0]][0]
    print(
        f"each crawl a fresh process and Crawler: render_pages={first['render_pages']}, "
        f"render_timeout={first['render_timeout']:g} s, {os.cpu_count()} cores"
    )
    side_by_side(runs)
    print("* of a crawl that renders: with the browser's processes, whose CPU time this bench cannot tell apart")
    # A rendering crawl's share counts the browser's own processes too: they are not reaped through this process
    # (the driver kills the browser), so their CPU time reads as the rest of the machine's. Only crawls that
    # rendered nothing say how busy the rest was.
    plain = [results for results in runs.values() if not any(result["rendered"] for result in results)]
    if any(all(result["others"] > BUSY_WARNING for result in results) for results in plain):
        print(
            f"WARNING: other processes kept more than {BUSY_WARNING:.0%} of this machine busy in every round of a "
            "crawl; its figures are slower than the machine can do, rerun when it is quiet"
        )
    met = targets(runs, smoke=args.smoke)
    failed = checks(runs)
    if failed:
        print("correctness checks FAILED:\n  " + "\n  ".join(failed))
    passed = met and not failed
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
