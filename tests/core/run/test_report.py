"""A crawl's progress and summary as the run log and history show them: counts, rate, time left, what limits it."""

from __future__ import annotations

import pytest

from pipelines_dagster.core.crawl.throttle import Limit, Limiter
from pipelines_dagster.core.run.report import CrawlProgress, CrawlReport, duration

DELAY = Limit(Limiter.CRAWL_DELAY, "https://docs.example.com", "2 s between requests", 68.0, 34)


def test_progress_says_how_far_how_fast_how_long_and_what_limits_it():
    progress = CrawlProgress(done=1200, total=5000, failed=14, succeeded=1180, elapsed_seconds=30.0, limits=(DELAY,))
    assert progress.pages_per_second == 40.0 and progress.eta_seconds == 95.0
    assert str(progress) == (
        "crawled 1200 of 5000 pages, 14 failed, 40.0 pages/s, about 1 min 35 s left; rate limited by robots.txt "
        "Crawl-delay of https://docs.example.com (2 s between requests): 34 requests waited 68.0 s in all"
    )


def test_pages_replayed_from_a_checkpoint_do_not_count_towards_the_rate():
    progress = CrawlProgress(done=600, total=1000, failed=0, resumed=500, elapsed_seconds=10.0)
    assert progress.pages_per_second == 10.0 and progress.eta_seconds == 40.0
    assert str(progress) == "crawled 600 of 1000 pages, 0 failed, 10.0 pages/s, about 40 s left"


@pytest.mark.parametrize(
    ("done", "total", "elapsed", "eta"),
    [(0, 10, 10.0, None), (10, 10, 10.0, 0.0), (12, 10, 10.0, 0.0), (5, 10, 0.0, None)],
)
def test_time_left_needs_a_rate_and_is_nothing_once_the_total_is_done(done, total, elapsed, eta):
    assert CrawlProgress(done=done, total=total, failed=0, elapsed_seconds=elapsed).eta_seconds == eta


def test_the_summary_counts_the_rate_over_the_crawl_not_the_wait_for_its_locks():
    report = CrawlReport(blob_key="k", blob_url="u", attempted=40, succeeded=38, empty=1, failed=1)
    report.duration_seconds, report.crawl_seconds, report.limits = 600.0, 20.0, (DELAY,)
    assert report.pages_per_second == 2.0
    assert report.summary() == (
        "40 attempted, 38 succeeded, 1 empty, 1 failed in 20.0 s of crawling (2.0 pages/s); rate limited by robots.txt "
        "Crawl-delay of https://docs.example.com (2 s between requests): 34 requests waited 68.0 s in all"
    )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.4, "0 s"), (42.4, "42 s"), (60, "1 min"), (185, "3 min 5 s"), (7800, "2 h 10 min"), (7200, "2 h")],
)
def test_durations_read_as_a_person_says_them(seconds, shown):
    assert duration(seconds) == shown
