"""Archiving documents whose page left the crawl, as far as the crawl's health allows, and restoring them when it
returns."""

from __future__ import annotations

from datetime import UTC, datetime

from pipelines_dagster.core.crawl.health import CrawlHealth
from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.kb.archive import archive_missing
from pipelines_dagster.core.kb.index import Destination, index_crawl
from tests.core.kb.test_index import documents, page, setup

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
A, B, C = "https://e.com/a", "https://e.com/b", "https://e.com/c"
HEALTHY = CrawlHealth(healthy=True, complete=True, why="all good")
INCOMPLETE = CrawlHealth(healthy=True, complete=False, why="stopped at max pages")
UNHEALTHY = CrawlHealth(healthy=False, complete=True, why="the site is down")


def gone(url: str, http_status: int) -> CrawlRecord:
    return CrawlRecord(url=url, status="failed", error=f"HTTP {http_status}", http_status=http_status)


def crawl(
    sessions, destination: Destination, records: list[CrawlRecord], run_id: str, health: CrawlHealth = HEALTHY
) -> tuple[int, int]:
    """Index a crawl and archive what it no longer covers, as far as its health allows: (archived, restored)."""
    stats = index_crawl(sessions, destination, lambda: records)
    archived = archive_missing(
        sessions,
        destination,
        health=health,
        crawled_urls=stats.crawled_urls,
        gone_urls=stats.gone_urls,
        run_id=run_id,
        now=NOW,
    )
    return archived, stats.restored


def archived(sessions, destination: Destination) -> dict[str, str | None]:
    return {
        url: document.archived_by_run_id
        for url, document in documents(sessions, destination.workspace_id).items()
        if document.archived_at is not None
    }


def test_a_url_that_left_the_list_is_archived_with_the_run_and_kept(sessions):
    destination = setup(sessions)
    crawl(sessions, destination, [page(A, "A"), page(B, "B")], "run-1")
    assert crawl(sessions, destination, [page(A, "A")], "run-2") == (1, 0)
    assert archived(sessions, destination) == {B: "run-2"}
    kept = documents(sessions, destination.workspace_id)[B]
    assert (kept.content, kept.status_state, kept.archived_at) == ("B", "ready", NOW)


def test_a_page_answering_404_or_410_is_archived(sessions):
    destination = setup(sessions)
    crawl(sessions, destination, [page(A, "A"), page(B, "B"), page(C, "C")], "run-1")
    assert crawl(sessions, destination, [page(A, "A"), gone(B, 404), gone(C, 410)], "run-2") == (2, 0)
    assert archived(sessions, destination) == {B: "run-2", C: "run-2"}


def test_a_page_failing_otherwise_is_not_archived(sessions):
    destination = setup(sessions)
    crawl(sessions, destination, [page(A, "A")], "run-1")
    assert crawl(sessions, destination, [gone(A, 500)], "run-2") == (0, 0)
    assert archived(sessions, destination) == {}


def test_a_page_that_returns_is_restored(sessions):
    destination = setup(sessions)
    crawl(sessions, destination, [page(A, "A"), page(B, "B")], "run-1")
    crawl(sessions, destination, [page(A, "A")], "run-2")
    # Unchanged content: restoring is not skipped with the content update.
    assert crawl(sessions, destination, [page(A, "A"), page(B, "B")], "run-3") == (0, 1)
    restored = documents(sessions, destination.workspace_id)[B]
    assert (restored.archived_at, restored.archived_by_run_id, restored.status_state) == (None, None, "ready")


def test_rerunning_over_the_same_crawl_archives_nothing_more(sessions):
    destination = setup(sessions)
    crawl(sessions, destination, [page(A, "A"), page(B, "B")], "run-1")
    assert crawl(sessions, destination, [page(A, "A")], "run-2") == (1, 0)
    assert crawl(sessions, destination, [page(A, "A")], "run-2-retry") == (0, 0)
    assert archived(sessions, destination) == {B: "run-2"}


def test_only_the_pipelines_own_documents_are_archived(sessions):
    ours = setup(sessions)
    theirs = setup(sessions)
    crawl(sessions, theirs, [page(C, "C")], "their-run")
    crawl(sessions, ours, [page(A, "A")], "run-1")
    assert crawl(sessions, ours, [page(B, "B")], "run-2") == (1, 0)
    assert archived(sessions, ours) == {A: "run-2"}
    assert archived(sessions, theirs) == {}


def test_an_unhealthy_crawl_archives_neither_what_it_did_not_cover_nor_what_answered_404(sessions):
    destination = setup(sessions)
    crawl(sessions, destination, [page(A, "A"), page(B, "B"), page(C, "C")], "run-1")
    # A CDN answering 404 for a minute, and C left out: nothing is known to have left.
    assert crawl(sessions, destination, [gone(A, 404), gone(B, 404)], "run-2", UNHEALTHY) == (0, 0)
    assert archived(sessions, destination) == {}


def test_an_incomplete_crawl_archives_only_what_answered_404_or_410(sessions):
    destination = setup(sessions)
    crawl(sessions, destination, [page(A, "A"), page(B, "B"), page(C, "C")], "run-1")
    assert crawl(sessions, destination, [page(A, "A"), gone(B, 410)], "run-2", INCOMPLETE) == (1, 0)
    assert archived(sessions, destination) == {B: "run-2"}
