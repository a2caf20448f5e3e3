"""A 100-page PDF parsed as a crawl parses it, against pypdf's own time on the same bytes (issue 28).

The bench writes a PDF of 100 pages of prose (about 40 lines a page, an outline entry every 10 pages), then times:
- ours: the extraction worker's answer to it, as a crawl asks (the body sent over the worker's pipe, pypdf's text
  of every page, the outline placed as headings, the markdown normalized and hashed, the reply read back);
- pypdf's: `PdfReader` over the same bytes and `extract_text()` of every page, in this process.
Both are warmed once (the worker started, pypdf imported in both) and timed in turn, the median of 5 runs each.
Target: ours within 2x of pypdf's.

`--smoke` parses 5 pages once each: it prints the same figures and exits 1 only when the text did not come back.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pypdf import PdfReader

# The fixtures the tests crawl make the bench's PDF too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines_dagster.core.crawl.extract.extracted import PDF
from pipelines_dagster.core.crawl.extract.workers import ExtractionWorkers
from tests.support.documents import pdf_document

TARGET_RATIO = 2.0
LINES_PER_PAGE = 40
VOCABULARY = (
    "pump valve seal pressure flow rate bearing shaft housing impeller motor voltage current filter inlet outlet "
    "gasket torque bolt flange coupling sensor reading maintenance schedule inspection warranty service manual "
    "install level mount bleed prime start stop check replace clean tighten loosen measure record report"
)
WORDS = VOCABULARY.split()
SEED = 28


def prose(rng: random.Random, page: int) -> str:
    """A page of sentences, each line a short one, numbered so every page's text is its own."""
    return "\n".join(
        f"{page}.{line} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 12))).capitalize() + "."
        for line in range(LINES_PER_PAGE)
    )


def timed(works: tuple[Callable[[], object], ...], runs: int) -> list[float]:
    """Each work's median seconds over `runs`, taken in turn, so a busy moment of the machine falls on both."""
    seconds: list[list[float]] = [[] for _ in works]
    for _ in range(runs):
        for work, taken in zip(works, seconds, strict=True):
            started = time.perf_counter()
            work()
            taken.append(time.perf_counter() - started)
    return [statistics.median(taken) for taken in seconds]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="5 pages, once each: figures printed, not judged")
    args = parser.parse_args()
    pages, runs = (5, 1) if args.smoke else (100, 5)
    rng = random.Random(SEED)
    texts = [prose(rng, page) for page in range(1, pages + 1)]
    outline = [(f"Part {page // 10 + 1}", page, 1) for page in range(0, pages, 10)]
    body = pdf_document(texts, outline=outline, title="Bench manual")

    def library() -> list[str]:
        return [page.extract_text() for page in PdfReader(io.BytesIO(body)).pages]

    workers = ExtractionWorkers(1, timeout=120)
    try:

        def ours() -> str:
            return workers.extract(body, media_type=PDF, charset=None, url="http://bench.invalid/manual.pdf").content

        content = ours()  # the worker started, and pypdf imported in it
        library()
        ours_seconds, library_seconds = timed((ours, library), runs)
    finally:
        workers.close()
    intact = all(text.splitlines()[-1] in content for text in texts) and content.startswith("# Part 1")
    ratio = ours_seconds / library_seconds
    print(f"PDF of {pages} pages, {len(body) / 1024:.0f} KiB, {len(content) / 1024:.0f} KiB of markdown")
    print(f"  ours (extraction worker): {ours_seconds * 1000:.1f} ms   median of {runs}")
    print(f"  pypdf in process:         {library_seconds * 1000:.1f} ms   median of {runs}")
    print(f"  ratio: {ratio:.2f}x (target <= {TARGET_RATIO:g}x)")
    if not intact:
        print("FAIL: the worker's markdown lacks text the PDF holds")
        return 1
    if args.smoke:
        return 0
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
