"""The frontier of a site crawl: the discovered pages still to fetch, breadth-first, within depth and
max pages, in memory that stays flat however many pages a site has.

`max_pages` counts URLs admitted to the frontier, not pages fetched: every page fetched is popped
from here and each admitted URL is popped once, so a crawl never fetches more than max_pages pages.
The caller normalizes and scopes URLs (and applies robots.txt and the SSRF guard) before `add`, so a
page it would skip does not spend the budget.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Self

# A URL's identity in the seen set: 8 bytes of blake2b, held as an int (36 bytes) instead of the
# string (~150). Two of 10,000 URLs collide with odds below 1 in 10^11; the cost would be one
# page not crawled.
_DIGEST_SIZE = 8


def url_digest(url: str) -> int:
    """A URL's identity in a seen set (see _DIGEST_SIZE)."""
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=_DIGEST_SIZE).digest())


def _at_least(name: str, value: int, low: int) -> int:
    """The caller's numbers come from a validated SiteConfig or its own loop: a bad one is a bug, not user input."""
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    return value


class Frontier:
    """Pages to crawl, first in first out: children are added after their parents, so every page of
    depth d is popped before any of depth d + 1.

    The first `memory_items` pending entries are held in memory; past that, entries append to a
    spool file (JSON lines, a temporary file under `spool_dir`) read back sequentially, in order, as
    memory drains. Every entry in memory precedes every entry in the spool, which keeps the order.
    """

    def __init__(self, *, max_pages: int, max_depth: int, memory_items: int = 10_000, spool_dir: Path | None = None):
        self.max_pages = _at_least("max_pages", max_pages, 1)
        self.max_depth = _at_least("max_depth", max_depth, 0)
        self.memory_items = _at_least("memory_items", memory_items, 1)
        self.spool_dir = spool_dir
        self.admitted = 0
        self.truncated = False
        self._closed = False
        # Admitted URLs only: a refusal is not remembered, so a URL refused as too deep can still be
        # admitted from a shallower page, and the set is bounded by max_pages.
        self._seen: set[int] = set()
        self._memory: deque[tuple[str, int]] = deque()
        self._spooled = 0
        self._spool_path: Path | None = None
        self._writer: BinaryIO | None = None
        self._reader: BinaryIO | None = None

    @property
    def pending(self) -> int:
        return len(self._memory) + self._spooled

    @property
    def spool_path(self) -> Path | None:
        """The spool file while one is open; None before the first spill and after close."""
        return self._spool_path

    def add(self, url: str, depth: int) -> bool:
        """Admit a discovered page; False when it was already admitted, is deeper than max_depth, or
        the page budget is spent (then `truncated` is set: discovery stopped short of the site)."""
        _at_least("depth", depth, 0)
        if self._closed:
            raise ValueError("the frontier is closed; adding to it would open a spool file nothing deletes")
        key = url_digest(url)
        if key in self._seen or depth > self.max_depth:
            return False
        if self.admitted >= self.max_pages:
            self.truncated = True
            return False
        self._seen.add(key)
        self.admitted += 1
        if self._spooled or len(self._memory) >= self.memory_items:
            self._spool(url, depth)
        else:
            self._memory.append((url, depth))
        return True

    def has(self, url: str) -> bool:
        """Whether `url` was admitted (or marked seen): adding it again would be refused."""
        return url_digest(url) in self._seen

    def mark_seen(self, url: str) -> None:
        """Refuse `url` from now on without queueing it or spending the page budget on it: a page
        the crawl already has under this URL (a redirect's target)."""
        self._seen.add(url_digest(url))

    def pop_batch(self, n: int) -> list[tuple[str, int]]:
        """Up to `n` pending (url, depth), shallowest first; empty when none is left."""
        _at_least("n", n, 1)
        batch: list[tuple[str, int]] = []
        while len(batch) < n:
            if not self._memory:
                self._refill()
                if not self._memory:
                    break
            batch.append(self._memory.popleft())
        return batch

    def close(self) -> None:
        """Close and delete the spool file; pending entries are dropped."""
        for handle in (self._writer, self._reader):
            if handle is not None:
                handle.close()
        if self._spool_path is not None:
            self._spool_path.unlink(missing_ok=True)
        self._writer = self._reader = self._spool_path = None
        self._spooled = 0
        self._memory.clear()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _spool(self, url: str, depth: int) -> None:
        if self._writer is None:
            fd, name = tempfile.mkstemp(prefix="frontier-", suffix=".jsonl", dir=self.spool_dir)
            self._spool_path = Path(name)
            self._writer = os.fdopen(fd, "wb")
            self._reader = self._spool_path.open("rb")
        self._writer.write(json.dumps([url, depth], separators=(",", ":")).encode() + b"\n")
        self._spooled += 1

    def _refill(self) -> None:
        """Move the oldest spooled entries into memory, up to memory_items, reading on from where the
        last refill stopped."""
        if not self._spooled or self._writer is None or self._reader is None:
            return
        self._writer.flush()
        count = min(self.memory_items - len(self._memory), self._spooled)
        for _ in range(count):
            url, depth = json.loads(self._reader.readline())
            self._memory.append((url, depth))
        self._spooled -= count
