"""The one rule a crawl is judged by: healthy (threshold, start URLs or list not all failed) and complete."""

from __future__ import annotations

import pytest

from pipelines_dagster.core.crawl.health import DEFAULT_MIN_SUCCESS_RATIO, judge_crawl, success_threshold


def judge(succeeded: int, attempted: int, *, truncated: bool = False, **site: int):
    return judge_crawl(
        attempted=attempted,
        succeeded=succeeded,
        failed=attempted - succeeded,
        threshold=0.8,
        truncated=truncated,
        **site,
    )


@pytest.mark.parametrize(
    ("succeeded", "attempted", "healthy"),
    [(8, 10, True), (10, 10, True), (7, 10, False), (0, 38, False), (0, 0, False)],
)
def test_a_crawl_is_healthy_at_its_threshold(succeeded, attempted, healthy):
    assert judge(succeeded, attempted).healthy is healthy


def test_an_unhealthy_crawl_says_why_and_removes_nothing():
    low = judge(7, 10)
    assert low.why == "7 of 10 URLs succeeded (70%), under the threshold of 80%"
    assert not low.removes_gone and not low.removes_unseen
    assert "7 of 10 URLs succeeded" in low.failure and "no page is recorded as removed" in low.failure


def test_a_list_that_failed_as_a_whole_is_unhealthy_whatever_the_threshold():
    none_at_all = judge_crawl(attempted=38, succeeded=0, failed=38, threshold=0.0, truncated=False)
    assert not none_at_all.healthy and none_at_all.why == "every URL of its list failed (38 of 38)"
    # Empty pages answered: the list did not fail, and a threshold of 0 takes them.
    answered = judge_crawl(attempted=3, succeeded=0, failed=1, threshold=0.0, truncated=False)
    assert answered.healthy


def test_a_site_crawl_whose_start_urls_all_failed_is_unhealthy_even_when_its_sitemap_pages_succeed():
    down = judge(9, 10, start_urls=1, start_urls_failed=1)
    assert not down.healthy
    assert down.why == "its start URL failed, so discovery could not reach the site's pages"
    assert "all 2 of its start URLs failed" in judge(9, 11, start_urls=2, start_urls_failed=2).why
    assert judge(9, 11, start_urls=2, start_urls_failed=1).healthy


def test_a_truncated_healthy_crawl_is_incomplete_removes_only_gone_pages_and_does_not_fail():
    truncated = judge(10, 10, truncated=True)
    assert truncated.healthy and not truncated.complete
    assert truncated.removes_gone and not truncated.removes_unseen
    assert "discovery stopped at max pages" in truncated.why
    whole = judge(10, 10)
    assert (
        whole.complete
        and whole.removes_unseen
        and whole.why == ("10 of 10 URLs succeeded (100%); the threshold is 80%")
    )


def test_the_threshold_is_the_pipelines_own_or_the_default():
    assert success_threshold({}) == DEFAULT_MIN_SUCCESS_RATIO
    assert success_threshold({"MIN_SUCCESS_RATIO": 0.95}) == 0.95


def test_a_crawl_that_attempted_nothing_fails_saying_what_to_fix_whatever_the_threshold():
    nothing = judge_crawl(attempted=0, succeeded=0, failed=0, threshold=0.0, truncated=False, start_urls=1)
    assert not nothing.healthy and nothing.why.startswith("no URL attempted")
    assert "give its connector URLs" in nothing.why and "no URL attempted" in nothing.failure
