"""Fixtures for the crawl engine's tests: a real loopback web server, and a net that keeps a test on loopback.

`loopback_only` is not autouse: only the modules that crawl ask for it, with
`pytestmark = pytest.mark.usefixtures("loopback_only")`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.web import WebServer, confine_to_loopback


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    confine_to_loopback(monkeypatch)


@pytest.fixture
def web() -> Iterator[WebServer]:
    with WebServer() as server:
        yield server
