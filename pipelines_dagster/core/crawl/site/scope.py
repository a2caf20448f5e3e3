"""A site crawl's scope: which discovered URLs belong to the site, by host or registrable domain and by
the config's include and exclude patterns."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.crawl.urls import host_of, normalize_url, path_and_query, registrable_domain


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Which URLs a site crawl may visit: those on a start URL's host (or, with `subdomains`,
    under a start URL's registrable domain) that the config's include and exclude patterns allow.

    Hosts are compared without scheme or port: http and https of a site are one site. An IP
    address host has no registrable domain, so it only matches itself.
    """

    config: SiteConfig
    hosts: frozenset[str]
    domains: frozenset[str]

    @classmethod
    def of(cls, config: SiteConfig) -> Scope:
        hosts = frozenset(host_of(url) for url in map(normalize_url, config.start_urls) if url is not None)
        domains = frozenset(filter(None, map(registrable_domain, hosts))) if config.subdomains else frozenset()
        return cls(config=config, hosts=hosts, domains=domains)

    def allows(self, url: str) -> bool:
        """Whether a discovered URL is in scope, judged on its normalized form (the config's query
        parameters dropped); a URL normalize_url refuses never is."""
        normalized = normalize_url(
            url, drop_query_params=self.config.drop_query_params, drop_all_query=self.config.drop_all_query
        )
        if normalized is None:
            return False
        return self._on_site(host_of(normalized)) and self.config.allows_path(path_and_query(normalized))

    def on_site(self, url: str) -> bool:
        """Whether `url` is on the site's hosts, whatever its path (a sitemap or robots.txt there)."""
        normalized = normalize_url(url)
        return normalized is not None and self._on_site(host_of(normalized))

    def _on_site(self, host: str) -> bool:
        return host in self.hosts or (bool(self.domains) and registrable_domain(host) in self.domains)
