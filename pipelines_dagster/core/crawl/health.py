"""Whether a crawl can be taken at its word: the one rule the run's outcome, the timeline, its
notifications and the KB archive all follow, judged once when the crawl is stored.

A crawl is *healthy* when enough of its URLs succeeded (the pipeline's threshold) and its start
URLs (a site crawl) or its list (a list crawl) did not fail as a whole. An unhealthy crawl (the
site down, a CDN answering 404 to everything for a minute) says nothing about the pages it could
not fetch: it removes and archives none of them, and its run fails. A healthy crawl is *complete*
unless discovery stopped at max pages; an incomplete one cannot tell a page it did not reach from
a page that left, so only a page that answered 404/410 is removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A pipeline may set its own threshold in its config, e.g. {"MIN_SUCCESS_RATIO": 0.95}.
THRESHOLD_KEY = "MIN_SUCCESS_RATIO"
DEFAULT_MIN_SUCCESS_RATIO = 0.8


def success_threshold(config: Mapping[str, Any]) -> float:
    """The share of URLs a pipeline's crawl must get right to be healthy."""
    return float(config.get(THRESHOLD_KEY, DEFAULT_MIN_SUCCESS_RATIO))


def succeeded_share(*, succeeded: int, attempted: int) -> float:
    return succeeded / attempted if attempted else 0.0


@dataclass(frozen=True, kw_only=True)
class CrawlHealth:
    healthy: bool
    """What the crawl says of the pages it reached is true; an unhealthy crawl fails its run."""
    complete: bool
    """Discovery did not stop at max pages: a page the crawl did not reach has left."""
    why: str
    """The verdict in a sentence: what made the crawl unhealthy, else what left it incomplete, else its
    success ratio."""

    @property
    def removes_gone(self) -> bool:
        """Whether a page that answered 404/410 is removed from the timeline and its document archived."""
        return self.healthy

    @property
    def removes_unseen(self) -> bool:
        """Whether a page the crawl did not cover is removed from the timeline and its document archived."""
        return self.healthy and self.complete

    @property
    def failure(self) -> str:
        """What an unhealthy crawl's run fails with."""
        return (
            f"the crawl is unhealthy: {self.why}. It is stored and its successes are charged, but no page is "
            "recorded as removed or archived after it, and the KB and the page timeline are not updated from "
            "it; see its failed URLs, and run the pipeline again once the site answers"
        )


def judge_crawl(
    *,
    attempted: int,
    succeeded: int,
    failed: int,
    threshold: float,
    truncated: bool,
    start_urls: int | None = None,
    start_urls_failed: int = 0,
) -> CrawlHealth:
    """The verdict on a crawl from its counts: `start_urls` is a site crawl's number of start URLs
    (None for a list crawl, whose list is every URL it attempted), `start_urls_failed` how many of
    them failed."""
    ratio = succeeded_share(succeeded=succeeded, attempted=attempted)
    problem = None
    if not attempted:
        problem = (
            "no URL attempted: the crawl had nothing to fetch; give its connector URLs (a list crawl) or start "
            "URLs on the site (a site crawl), and check that robots.txt lets the crawler in"
        )
    elif start_urls and start_urls_failed >= start_urls:
        problem = (
            "its start URL failed" if start_urls == 1 else f"all {start_urls} of its start URLs failed"
        ) + ", so discovery could not reach the site's pages"
    elif start_urls is None and failed >= attempted:
        problem = f"every URL of its list failed ({failed} of {attempted})"
    elif ratio < threshold:
        problem = f"{succeeded} of {attempted} URLs succeeded ({ratio:.0%}), under the threshold of {threshold:.0%}"
    if problem is not None:
        return CrawlHealth(healthy=False, complete=not truncated, why=problem)
    share = f"{succeeded} of {attempted} URLs succeeded ({ratio:.0%}); the threshold is {threshold:.0%}"
    if truncated:
        return CrawlHealth(
            healthy=True,
            complete=False,
            why=f"{share}; discovery stopped at max pages, so pages past the limit were not looked for",
        )
    return CrawlHealth(healthy=True, complete=True, why=share)
