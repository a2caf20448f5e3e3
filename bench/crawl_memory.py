"""Crawl memory: peak resident memory of `crawl_results` for 500 and for 5,000 URLs, for a first crawl
and for an unchanged re-crawl (which carries every page's stored content forward from the last crawl).

Each size is materialized in a fresh Python process, so the peaks do not mix. A sampling thread
in that process reads the RSS of the process itself and of its descendants (the extraction
worker processes) every few milliseconds; the peak counted is the largest sum seen at one
instant. The corpus server runs in its own process, outside what is measured.

Target (issue 3): the 5,000-URL peak is within 1.5x of the 500-URL peak, for both crawls. Exits 1
when it is not or when a crawl does not succeed for every URL.

`--mode site` measures site crawls instead (issue 13): each starts from the first page, discovers
the rest from the corpus's /sitemap.xml (5,000 pages) and every page's links, bounded by max pages
= the size, so 500 and 5,000 pages are discovered, queued, fetched and stored. Target: the
5,000-page peak within 1.2x of the 500-page peak, for both crawls, and every page found.

`--smoke` does the same at 5 and 20 pages: it prints the same figures and exits 1 only when a crawl
does not succeed for every page, whatever the ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _corpus import EmbeddedStack, KiB, MiB, TreeSampler, page_paths, report_result, run_worker, served_corpus

SEED = 20240604
SIZES = (500, 5000)
SMOKE_SIZES = (5, 20)
RATIO_TARGET = {"list": 1.5, "site": 1.2}


def sampled(stack: EmbeddedStack, workspace_id: int, pipeline_id: int) -> dict[str, Any]:
    with TreeSampler(interval=0.01) as sampler:
        run = stack.materialize(workspace_id, pipeline_id)
    return {
        "seconds": sampler.wall,
        "success": run.success,
        "succeeded": run.metadata.get("urls_succeeded"),
        "unchanged": run.metadata.get("urls_unchanged"),
        "failed": run.metadata.get("urls_failed"),
        "empty": run.metadata.get("urls_empty"),
        "bytes": run.metadata.get("bytes"),
        "peak_main": sampler.peak_main,
        "peak_children": sampler.peak_children,
        "peak_total": sampler.peak_total,
    }


def measure(base_url: str, pages: int, mode: str) -> dict[str, Any]:
    """Materialize crawl_results twice for a pipeline over the first `pages` URLs (or a site crawl of
    `pages` pages), sampling memory each time."""
    urls = [base_url + path for path in page_paths(pages)]
    with EmbeddedStack() as stack:
        stack.warm_up()
        if mode == "site":
            from pipelines_dagster.core.crawl.site.config import SiteConfig

            site = SiteConfig.validated(start_urls=urls[:1], max_pages=pages, max_depth=1, include=["/docs/**"])
            workspace_id, pipeline_id = stack.pipeline([], site=site)
        else:
            workspace_id, pipeline_id = stack.pipeline(urls)
        first = sampled(stack, workspace_id, pipeline_id)
        again = sampled(stack, workspace_id, pipeline_id)
    return {"pages": pages, "first": first, "again": again}


def mib(value: int) -> str:
    return f"{value / MiB:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-kib", type=int, default=8, help="smallest page in KiB")
    parser.add_argument("--max-kib", type=int, default=20, help="largest page in KiB (about)")
    parser.add_argument("--mode", choices=sorted(RATIO_TARGET), default="list", help="list or site crawls")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({' and '.join(map(str, SMOKE_SIZES))} pages) that proves the bench works: exit 1 only "
        "when a crawl does not succeed for every page, whatever the ratio",
    )
    parser.add_argument("--worker", nargs=2, metavar=("BASE_URL", "PAGES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        report_result(measure(args.worker[0], int(args.worker[1]), args.mode))
        return 0
    target = RATIO_TARGET[args.mode]
    sizes = SMOKE_SIZES if args.smoke else SIZES

    results = []
    with served_corpus(
        pages=max(sizes),
        min_bytes=args.min_kib * KiB,
        seed=SEED,
        spread=(args.max_kib - args.min_kib) * KiB,
        sitemap=args.mode == "site",
    ) as (server, urls):
        print(
            f"corpus: {len(urls)} distinct seeded documentation pages of {args.min_kib}-{args.max_kib} KiB, "
            f"served by uvicorn in its own process on 127.0.0.1:{server.port}"
        )
        for pages in sizes:
            result = run_worker(Path(__file__), ["--mode", args.mode, "--worker", server.url(""), str(pages)])
            results.append(result)
            for name, crawl in (("first crawl", result["first"]), ("unchanged re-crawl", result["again"])):
                print(
                    f"{pages:>5} URLs, {name + ':':20} {crawl['seconds']:5.1f} s, {crawl['succeeded']} succeeded "
                    f"({crawl['unchanged']} unchanged), {crawl['empty']} empty, {crawl['failed']} failed, blob "
                    f"{mib(crawl['bytes'] or 0)}; peak RSS {mib(crawl['peak_total'])} (materializing process "
                    f"{mib(crawl['peak_main'])}, extraction workers {mib(crawl['peak_children'])})"
                )

    small, large = results
    passed = True
    for name, key in (("first crawl", "first"), ("unchanged re-crawl", "again")):
        ratio = large[key]["peak_total"] / small[key]["peak_total"]
        main_ratio = large[key]["peak_main"] / small[key]["peak_main"]
        passed &= ratio <= target or args.smoke
        verdict = "not judged (smoke)" if args.smoke else "meets the target" if ratio <= target else "MISSES the target"
        print(
            f"{name}: peak RSS ratio {large['pages']}/{small['pages']} = {mib(large[key]['peak_total'])} / "
            f"{mib(small[key]['peak_total'])} = {ratio:.2f}x (target <= {target}): {verdict} "
            f"(materializing process alone: {main_ratio:.2f}x)"
        )
    for result in results:
        for crawl, unchanged in ((result["first"], 0), (result["again"], result["pages"])):
            if not (crawl["success"] and crawl["succeeded"] == result["pages"] and crawl["unchanged"] == unchanged):
                print(
                    f"correctness FAILED: a {result['pages']}-URL crawl succeeded for {crawl['succeeded']} URLs, "
                    f"{crawl['unchanged']} unchanged (expected {unchanged})"
                )
                passed = False
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
