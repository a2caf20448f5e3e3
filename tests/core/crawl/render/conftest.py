"""The render tests' parts: the system Chromium (absent: skipped locally, failed under CI=true), a server
on 127.0.0.2 the network policy refuses, and a real Fetcher whose guard allows 127.0.0.1 alone."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from pipelines_dagster.core.crawl.extract.extracted import Extracted
from pipelines_dagster.core.crawl.fetch import Fetcher
from pipelines_dagster.core.crawl.types import CrawlerConfig, ListSource
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.core.security.ssrf import AddressGuard, PinnedTransport, Resolver
from tests.conftest import missing
from tests.support.web import WebServer

# The system Chromium (.ci/run installs it when absent); the variable points elsewhere only to test the skip.
CHROMIUM = os.environ.get("PIPELINES_TEST_CHROMIUM", "/usr/bin/chromium")
CONFIG = CrawlerConfig(
    user_agent="pipelines-dagster-tests/1.0",
    connect_timeout=2,
    total_timeout=2,
    max_body_bytes=64 * 1024,
    max_attempts=3,
    backoff_base=0.05,
    network=NetworkPolicy(allowed_networks=("127.0.0.1/32",)),
)


@pytest.fixture(scope="session")
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        # .ci/run installs it, so under CI its absence fails the test.
        missing(f"no Chromium at {CHROMIUM}: install it (apt-get install chromium) to run the render tests")
    return CHROMIUM


@pytest.fixture
def private() -> Iterator[WebServer]:
    """A server on 127.0.0.2: loopback, but outside the policy's 127.0.0.1/32, so nothing may reach it."""
    with WebServer(host="127.0.0.2") as server:
        yield server


@asynccontextmanager
async def guarded_fetcher(
    *, resolver: Resolver | None = None, config: CrawlerConfig = CONFIG
) -> AsyncIterator[Fetcher]:
    """A Fetcher as a crawl builds one: its client connects only through the address guard."""
    guard = AddressGuard(config.network, resolver=resolver)
    async with httpx.AsyncClient(transport=PinnedTransport(guard), follow_redirects=False) as client:
        yield Fetcher(config, guard=guard, client=client, extract=_never_extract, source=ListSource([]), previous={})


async def _never_extract(*_args: object, **_kwargs: object) -> Extracted:
    raise AssertionError("rendering fetches subresources; it never extracts them")
