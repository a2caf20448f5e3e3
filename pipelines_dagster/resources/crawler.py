"""The `crawler` resource: the crawl engine, configured per deployment, one set of extraction workers per run.

Given the `locks` resource, its per-host concurrency and Crawl-delay hold across every run sharing that backend;
given an extraction slots directory, the extraction workers of every run on the machine share its cores.

The engine (and httpx with it) is imported when the resource starts, not with the code location
that every run process loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field, PrivateAttr

from pipelines_dagster.core.crawl.types import CrawlerConfig
from pipelines_dagster.resources.locks import LocksResource
from pipelines_dagster.resources.network import NetworkAccess

if TYPE_CHECKING:
    from pipelines_dagster.core.crawl.crawler import Crawler


class CrawlerResource(dg.ConfigurableResource["CrawlerResource"]):
    user_agent: str = CrawlerConfig.user_agent
    global_concurrency: int = CrawlerConfig.global_concurrency
    per_host_concurrency: int = CrawlerConfig.per_host_concurrency
    connect_timeout: float = CrawlerConfig.connect_timeout
    total_timeout: float = CrawlerConfig.total_timeout
    max_body_bytes: int = Field(
        default=CrawlerConfig.max_body_bytes, description="The largest HTML or text page read, in bytes (decoded)."
    )
    max_document_bytes: int = Field(
        default=CrawlerConfig.max_document_bytes, description="The largest PDF or DOCX document read, in bytes."
    )
    max_attempts: int = CrawlerConfig.max_attempts
    obey_robots: bool = True
    max_crawl_delay: float = Field(
        default=CrawlerConfig.max_crawl_delay,
        description="The longest robots.txt Crawl-delay honoured, in seconds between requests to one site.",
    )
    extract_timeout: float = Field(
        default=CrawlerConfig.extract_timeout,
        description="Seconds one page's text extraction may take before it fails and its worker is replaced.",
    )
    render_timeout: float = Field(
        default=CrawlerConfig.render_timeout,
        description="Seconds one page may take to render in the browser (load, scripts, settling) before it fails.",
    )
    render_pages: int = Field(
        default=CrawlerConfig.render_pages, ge=1, description="Pages a crawl renders in the browser at once."
    )
    chromium: str = Field(
        default=CrawlerConfig.chromium,
        description="The Chromium executable pages are rendered in (Debian's `chromium` package installs this one).",
    )
    network: NetworkAccess = Field(default_factory=NetworkAccess, description="Where the crawler may connect.")
    locks: LocksResource | None = Field(
        default=None,
        description="Where the per-host budget shared by all runs lives; without it each run keeps its own.",
    )
    extraction_slots_dir: str | None = Field(
        default=None,
        description="The directory through which all runs on the machine share its extraction slots; without it "
        "each run starts up to a worker per core of its own.",
    )
    extraction_slots: int | None = Field(
        default=None, ge=1, description="Extraction processes live at once on the machine. Default: its cores."
    )

    _crawler: Crawler | None = PrivateAttr(default=None)

    def config(self) -> CrawlerConfig:
        return CrawlerConfig(
            user_agent=self.user_agent,
            global_concurrency=self.global_concurrency,
            per_host_concurrency=self.per_host_concurrency,
            connect_timeout=self.connect_timeout,
            total_timeout=self.total_timeout,
            max_body_bytes=self.max_body_bytes,
            max_document_bytes=self.max_document_bytes,
            max_attempts=self.max_attempts,
            obey_robots=self.obey_robots,
            max_crawl_delay=self.max_crawl_delay,
            extract_timeout=self.extract_timeout,
            render_timeout=self.render_timeout,
            render_pages=self.render_pages,
            chromium=self.chromium,
            network=self.network.policy(),
        )

    def _build(self) -> Crawler:
        from pipelines_dagster.core.crawl.crawler import Crawler, usable_cores
        from pipelines_dagster.core.crawl.extract.slots import ExtractionSlots
        from pipelines_dagster.core.crawl.host_budget import HostBudget

        budget = HostBudget(self.locks.locks) if self.locks is not None else None
        slots = None
        if self.extraction_slots_dir is not None:
            slots = ExtractionSlots(Path(self.extraction_slots_dir), self.extraction_slots or usable_cores())
        return Crawler(self.config(), host_budget=budget, slots=slots)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._crawler = self._build()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._crawler is not None:
            self._crawler.close()
            self._crawler = None

    @property
    def crawler(self) -> Crawler:
        if self._crawler is None:
            self._crawler = self._build()
        return self._crawler
