"""The site-crawl frontier: de-duplication, depth and page bounds, breadth-first order through the
spool file, and memory that stays flat in the number of discovered pages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines_dagster.core.crawl.site.frontier import Frontier

REPO_DIR = Path(__file__).resolve().parents[4]


def test_a_url_is_admitted_once():
    with Frontier(max_pages=10, max_depth=2) as frontier:
        assert frontier.add("https://e.com/a", 0)
        assert not frontier.add("https://e.com/a", 1)
        assert frontier.add("https://e.com/b", 1)
        assert (frontier.admitted, frontier.pending) == (2, 2)
        assert frontier.pop_batch(10) == [("https://e.com/a", 0), ("https://e.com/b", 1)]
        assert not frontier.add("https://e.com/a", 1), "a page already crawled is not queued again"
        assert not frontier.truncated


def test_pages_deeper_than_max_depth_are_refused_but_not_remembered():
    with Frontier(max_pages=10, max_depth=1) as frontier:
        assert not frontier.add("https://e.com/deep", 2)
        assert frontier.add("https://e.com/deep", 1), "reached again from a shallower page, it is admitted"
        assert (frontier.admitted, frontier.pending, frontier.truncated) == (1, 1, False)


def test_the_page_budget_counts_admitted_urls_and_a_refusal_marks_truncated():
    with Frontier(max_pages=3, max_depth=5) as frontier:
        assert all(frontier.add(f"https://e.com/{i}", 1) for i in range(3))
        assert not frontier.truncated, "a site of exactly max_pages pages was discovered whole"
        assert not frontier.add("https://e.com/1", 1) and not frontier.truncated  # a duplicate spends nothing
        assert not frontier.add("https://e.com/too-deep", 6) and not frontier.truncated
        assert not frontier.add("https://e.com/3", 1)
        assert frontier.truncated
        assert len(frontier.pop_batch(10)) == 3
        assert not frontier.add("https://e.com/4", 2), "popping does not free budget: max_pages bounds fetches"
        assert (frontier.admitted, frontier.pending) == (3, 0)


def test_breadth_first_order_holds_across_the_memory_and_spool_boundary(tmp_path):
    """A crawl of a tree (each page links to three children) through a frontier that holds 3 entries
    in memory: pages come back in the order they were admitted, so shallowest first."""
    admitted: list[tuple[str, int]] = []
    popped: list[tuple[str, int]] = []
    spooled = False
    with Frontier(max_pages=20, max_depth=10, memory_items=3, spool_dir=tmp_path) as frontier:
        assert frontier.add("https://e.com/", 0)
        admitted.append(("https://e.com/", 0))
        while batch := frontier.pop_batch(2):
            popped.extend(batch)
            for url, depth in batch:
                for child in (f"{url}{n}/" for n in range(3)):
                    if frontier.add(child, depth + 1):
                        admitted.append((child, depth + 1))
                spooled = spooled or frontier.spool_path is not None
        assert frontier.truncated and frontier.admitted == 20
    assert spooled
    assert popped == admitted and len(popped) == 20
    assert [depth for _, depth in popped] == sorted(depth for _, depth in popped)


def test_the_spool_file_is_removed_on_close_and_entries_survive_it_verbatim(tmp_path):
    urls = [f'https://e.com/ü/"quoted"/{i}?q=a,b' for i in range(5)]
    frontier = Frontier(max_pages=10, max_depth=1, memory_items=1, spool_dir=tmp_path)
    with pytest.raises(RuntimeError), frontier:
        for url in urls:
            frontier.add(url, 1)
        spool = frontier.spool_path
        assert spool is not None and list(tmp_path.iterdir()) == [spool]
        assert frontier.pop_batch(4) == [(url, 1) for url in urls[:4]]
        raise RuntimeError("the crawl fails")
    assert list(tmp_path.iterdir()) == [] and frontier.spool_path is None and frontier.pending == 0
    with pytest.raises(ValueError, match="closed"):
        frontier.add("https://e.com/late", 1)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="max_pages"):
        Frontier(max_pages=0, max_depth=1)
    with pytest.raises(ValueError, match="max_depth"):
        Frontier(max_pages=1, max_depth=-1)
    with pytest.raises(ValueError, match="memory_items"):
        Frontier(max_pages=1, max_depth=1, memory_items=0)
    with Frontier(max_pages=1, max_depth=1) as frontier:
        with pytest.raises(ValueError, match="depth"):
            frontier.add("https://e.com/", -1)
        with pytest.raises(ValueError, match="n must be at least 1"):
            frontier.pop_batch(0)


# Run in a fresh interpreter so the peak is the frontier's alone: every URL is discovered (at the
# breadth-first worst case, a whole level pending at once) and then crawled. Linux's VmHWM is the peak
# of this process's own memory; ru_maxrss would also count the pytest process it was forked from.
_MEASURE = """
import json, resource, sys
from pathlib import Path
from pipelines_dagster.core.crawl.site.frontier import Frontier

def peak():
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

count, memory_items, spool_dir = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
slug = "a-page-title-long-enough-for-a-real-slug.html"  # with it, a URL is 100 characters
before = peak()
with Frontier(max_pages=10_000, max_depth=3, memory_items=memory_items, spool_dir=spool_dir) as frontier:
    for i in range(count):
        frontier.add(f"https://docs.example.com/section-{i % 97:03d}/articles/{i:08d}/{slug}", 1)
    while frontier.pop_batch(50):
        pass
print(json.dumps({"before": before, "peak": peak()}))
"""


def _peak_rss(count: int, memory_items: int, spool_dir: Path) -> dict[str, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(count), str(memory_items), str(spool_dir)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout)


def test_peak_memory_stays_flat_in_the_number_of_discovered_pages(tmp_path):
    small = _peak_rss(500, 500, tmp_path)
    large = _peak_rss(5_000, 500, tmp_path)
    assert large["peak"] <= 1.2 * small["peak"], (small, large)
    # The interpreter's own ~15 MB would hide 5,000 pending pages held in memory (~1 MB) from the ratio
    # above; the growth over it shows that the spool, not the baseline, keeps the peak down.
    unspooled = _peak_rss(5_000, 5_000, tmp_path)
    growth, unspooled_growth = large["peak"] - large["before"], unspooled["peak"] - unspooled["before"]
    assert growth < 0.75 * unspooled_growth, (large, unspooled)
