"""What a site crawl fetches next: start URLs, then the pages sitemaps list and crawled pages link to.

`SiteSource` is the crawl's URL source in `site` mode. It admits URLs to a `Frontier` (breadth-first,
bounded by depth and max pages, spooled to disk) after normalizing them (the config's query
parameters dropped) and checking them against the crawl's `Scope`; the crawl takes batches from
it and reports each outcome back, so a page's links join the frontier one level deeper. An
unchanged page (a 304, or the same bytes) is not parsed again: its links are the ones the previous
crawl stored. The crawler still applies the SSRF guard and robots.txt to every URL it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pipelines_dagster.core.frontier import Frontier
from pipelines_dagster.core.site_config import SiteConfig
from pipelines_dagster.core.urls import Scope, normalize_url

# Pages a sitemap lists are one link away from the start URLs.
SITEMAP_DEPTH = 1


@dataclass(frozen=True, kw_only=True)
class Discovered:
    """A page's contribution to discovery, as the crawl reports it: its URL, whether it was fetched
    and parsed this time, and the links (and canonical URL) its HTML named."""

    url: str
    succeeded: bool
    unchanged: bool = False
    links: Sequence[str] = ()
    canonical: str | None = None


class SiteSource:
    """The URLs of a site crawl, handed out in breadth-first order as the crawl asks for them."""

    def __init__(
        self,
        config: SiteConfig,
        frontier: Frontier,
        *,
        stored_links: Callable[[str], Sequence[str]] = lambda url: (),
    ) -> None:
        self.config = config
        self.scope = Scope.of(config)
        self.out_of_scope = 0
        """Discovered URLs refused for scope (another host, an excluded path, not http(s))."""
        self._frontier = frontier
        self._stored_links = stored_links
        self._in_flight: dict[str, int] = {}
        for url in config.start_urls:
            self._admit(url, 0)

    @property
    def truncated(self) -> bool:
        """Discovery stopped at max pages: pages past the limit were not looked for."""
        return self._frontier.truncated

    @property
    def discovered(self) -> int:
        return self._frontier.admitted

    def add_sitemap_urls(self, urls: Iterable[str]) -> int:
        """Admit the pages a sitemap lists; how many were new and in scope."""
        return sum(self._admit(url, SITEMAP_DEPTH) for url in urls)

    def take(self, n: int) -> list[str]:
        """Up to `n` URLs to fetch next, shallowest first; empty when none is waiting now (pages in
        flight may still add more)."""
        batch = self._frontier.pop_batch(n)
        self._in_flight.update(batch)
        return [url for url, _ in batch]

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def done(self, page: Discovered) -> None:
        """A taken URL's crawl ended: admit what its page links to, one level deeper."""
        depth = self._in_flight.pop(page.url, 0)
        if not page.succeeded or depth >= self.config.max_depth:
            return
        links = self._stored_links(page.url) if page.unchanged else page.links
        for link in (page.canonical, *links) if page.canonical else links:
            self._admit(link, depth + 1)

    def _admit(self, url: str, depth: int) -> bool:
        normalized = normalize_url(
            url, drop_query_params=self.config.drop_query_params, drop_all_query=self.config.drop_all_query
        )
        if normalized is None or not self.scope.allows(normalized):
            self.out_of_scope += 1
            return False
        return self._frontier.add(normalized, depth)
