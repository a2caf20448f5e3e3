"""Crawl memory: peak resident memory of `crawl_results` for 500 and for 5,000 URLs.

Each size is materialized in a fresh Python process, so the peaks do not mix. A sampling thread
in that process reads the RSS of the process itself and of its descendants (the extraction
worker processes) every few milliseconds; the peak counted is the largest sum seen at one
instant. The corpus server runs in its own process, outside what is measured.

Target (issue 3): the 5,000-URL peak is within 1.5x of the 500-URL peak. Exits 1 when it is not
or when a crawl does not succeed for every URL.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _corpus import KiB, MiB, EmbeddedStack, TreeSampler, page_paths, report_result, run_worker, served_corpus

SEED = 20240604
SIZES = (500, 5000)
RATIO_TARGET = 1.5


def measure(base_url: str, pages: int) -> dict[str, Any]:
    """Materialize crawl_results for a pipeline over the first `pages` URLs and sample its memory."""
    urls = [base_url + path for path in page_paths(pages)]
    with EmbeddedStack() as stack:
        stack.warm_up()
        workspace_id, pipeline_id = stack.pipeline(urls)
        with TreeSampler(interval=0.01) as sampler:
            run = stack.materialize(workspace_id, pipeline_id)
    return {
        "pages": pages,
        "seconds": sampler.wall,
        "success": run.success,
        "succeeded": run.metadata.get("urls_succeeded"),
        "failed": run.metadata.get("urls_failed"),
        "empty": run.metadata.get("urls_empty"),
        "bytes": run.metadata.get("bytes"),
        "peak_main": sampler.peak_main,
        "peak_children": sampler.peak_children,
        "peak_total": sampler.peak_total,
    }


def mib(value: int) -> str:
    return f"{value / MiB:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-kib", type=int, default=8, help="smallest page in KiB")
    parser.add_argument("--max-kib", type=int, default=20, help="largest page in KiB (about)")
    parser.add_argument("--worker", nargs=2, metavar=("BASE_URL", "PAGES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        report_result(measure(args.worker[0], int(args.worker[1])))
        return 0

    results = []
    with served_corpus(pages=max(SIZES), min_bytes=args.min_kib * KiB, seed=SEED,
                       spread=(args.max_kib - args.min_kib) * KiB) as (server, urls):
        print(f"corpus: {len(urls)} distinct seeded documentation pages of {args.min_kib}-{args.max_kib} KiB, "
              f"served by uvicorn in its own process on 127.0.0.1:{server.port}")
        for pages in SIZES:
            result = run_worker(Path(__file__), ["--worker", server.url(""), str(pages)])
            results.append(result)
            print(f"{pages:>5} URLs: crawl_results in {result['seconds']:.1f} s, {result['succeeded']} succeeded, "
                  f"{result['empty']} empty, {result['failed']} failed, blob {mib(result['bytes'] or 0)}; "
                  f"peak RSS {mib(result['peak_total'])} (materializing process {mib(result['peak_main'])}, "
                  f"extraction workers {mib(result['peak_children'])})")

    small, large = results
    ratio = large["peak_total"] / small["peak_total"]
    main_ratio = large["peak_main"] / small["peak_main"]
    passed = ratio <= RATIO_TARGET
    print(f"peak RSS ratio 5000/500 = {mib(large['peak_total'])} / {mib(small['peak_total'])} = {ratio:.2f}x "
          f"(target <= {RATIO_TARGET}): {'meets' if passed else 'MISSES'} the target "
          f"(materializing process alone: {main_ratio:.2f}x)")
    for result in results:
        if not (result["success"] and result["succeeded"] == result["pages"]):
            print(f"correctness FAILED: the {result['pages']}-URL crawl succeeded for {result['succeeded']} URLs")
            passed = False
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
