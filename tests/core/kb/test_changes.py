"""The page-change comparison and timeline queries, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import PageChange, PageState, Pipeline
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.crawl.health import CrawlHealth
from pipelines_dagster.core.crawl.record import CrawlRecord
from pipelines_dagster.core.kb import changes as page_changes
from pipelines_dagster.core.kb.changes import list_changes, normalize, record_changes, unified_diff
from pipelines_dagster.core.kb.index import content_hash

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HEALTHY = CrawlHealth(healthy=True, complete=True, why="all good")


def ok(url: str, content: str) -> CrawlRecord:
    return CrawlRecord(url=url, status="success", content=content, http_status=200)


def failed(url: str, http_status: int | None) -> CrawlRecord:
    return CrawlRecord(url=url, status="failed", http_status=http_status, error="boom")


@pytest.fixture
def pipeline(sessions) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="owner").workspace
        pipeline = Pipeline(workspace_id=workspace.id, name="p")
        session.add(pipeline)
        session.flush()
        return workspace.id, pipeline.id


def record(sessions, pipeline, run_id, records, now=T0, health=HEALTHY):
    workspace_id, pipeline_id = pipeline
    return record_changes(
        sessions,
        workspace_id=workspace_id,
        pipeline_id=pipeline_id,
        run_id=run_id,
        records=records,
        now=now,
        health=health,
    )


def timeline(sessions, pipeline_id) -> list[tuple[str, str]]:
    with sessions() as session:
        rows = session.execute(
            sa.select(PageChange.url, PageChange.status)
            .where(PageChange.pipeline_id == pipeline_id)
            .order_by(PageChange.id)
        )
        return [tuple(row) for row in rows]


def test_normalize_folds_whitespace_and_blank_lines():
    assert normalize("# Title\n\n\n  Some   text\t here \n\n") == "# Title\nSome text here"
    assert content_hash(normalize("a  b\n\nc")) == content_hash(normalize("a b\nc  "))


def test_a_large_diff_is_truncated_at_a_line_and_says_so():
    before = "\n".join(f"line {n}" for n in range(20_000))
    after = "\n".join(f"line {n} edited" for n in range(20_000))
    diff = unified_diff(before, after, url="https://x.test/", max_bytes=64 * 1024)
    assert len(diff.encode()) < 64 * 1024 + 100
    assert "diff truncated at 65536 bytes" in diff
    body = diff.rsplit("\n...", 1)[0]
    assert body.splitlines()[-1].startswith(("+line", "-line"))
    assert unified_diff("a\nb", "a\nc", url="u") == "--- u (before)\n+++ u (after)\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"


def test_first_crawl_is_all_new_then_edits_additions_and_removals(sessions, pipeline):
    first = record(
        sessions, pipeline, "run-1", [ok("a", "A text"), ok("b", "B text"), ok("c", "C text"), ok("d", "D text")]
    )
    assert (first.new, first.changed, first.same, first.removed) == (4, 0, 0, 0)
    second = record(
        sessions,
        pipeline,
        "run-2",
        [
            ok("a", "A  text\n\n"),  # whitespace only: same
            ok("b", "B text, edited"),  # changed
            failed("c", 404),  # gone: removed
            ok("e", "E text"),  # new
        ],
        now=T0 + timedelta(hours=1),
    )  # d is no longer crawled: removed
    assert (second.new, second.changed, second.same, second.removed) == (1, 1, 1, 2)
    assert timeline(sessions, pipeline[1])[4:] == [("b", "changed"), ("c", "removed"), ("e", "new"), ("d", "removed")]
    with sessions() as session:
        changed = session.scalars(
            sa.select(PageChange).where(PageChange.pipeline_id == pipeline[1], PageChange.status == "changed")
        ).one()
        assert changed.diff.endswith("-B text\n+B text, edited\n")
        assert (changed.previous_hash, changed.current_hash) == (content_hash("B text"), content_hash("B text, edited"))
        same = session.scalars(
            sa.select(PageState).where(PageState.pipeline_id == pipeline[1], PageState.url == "a")
        ).one()
        assert same.last_checked_at == T0 + timedelta(hours=1) and same.last_changed_at == T0


def test_an_unchanged_crawl_appends_nothing(sessions, pipeline):
    pages = [ok("a", "A"), ok("b", "B")]
    record(sessions, pipeline, "run-1", pages)
    again = record(sessions, pipeline, "run-2", pages)
    assert (again.new, again.changed, again.removed, again.same) == (0, 0, 0, 2)
    assert len(timeline(sessions, pipeline[1])) == 2


def test_a_failed_url_keeps_its_last_good_hash(sessions, pipeline):
    record(sessions, pipeline, "run-1", [ok("a", "A v1")])
    skipped = record(sessions, pipeline, "run-2", [failed("a", 500)])
    assert (skipped.skipped, skipped.removed) == (1, 0)
    back = record(sessions, pipeline, "run-3", [ok("a", "A v1")])
    assert back.same == 1
    edited = record(sessions, pipeline, "run-4", [failed("a", None), ok("b", "B")])
    assert edited.removed == 0 and timeline(sessions, pipeline[1]) == [("a", "new"), ("b", "new")]


def test_a_removed_page_that_returns_is_new_again(sessions, pipeline):
    record(sessions, pipeline, "run-1", [ok("a", "A")])
    record(sessions, pipeline, "run-2", [failed("a", 410)])
    record(sessions, pipeline, "run-3", [failed("a", 404)])
    record(sessions, pipeline, "run-4", [ok("a", "A")])
    assert timeline(sessions, pipeline[1]) == [("a", "new"), ("a", "removed"), ("a", "new")]


def test_a_crawl_stopped_at_max_pages_removes_only_the_pages_that_answered_404(sessions, pipeline):
    record(sessions, pipeline, "run-1", [ok("a", "A"), ok("b", "B"), ok("c", "C"), ok("d", "D")])
    incomplete = CrawlHealth(healthy=True, complete=False, why="stopped at max pages")
    truncated = record(sessions, pipeline, "run-2", [ok("a", "A2"), failed("d", 404)], health=incomplete)
    assert (truncated.changed, truncated.removed) == (1, 1)
    assert timeline(sessions, pipeline[1])[4:] == [("a", "changed"), ("d", "removed")]
    full = record(sessions, pipeline, "run-3", [ok("a", "A2")])
    assert full.removed == 2


def test_an_unhealthy_crawl_removes_nothing_and_the_next_healthy_one_finds_nothing_new(sessions, pipeline):
    record(sessions, pipeline, "run-1", [ok("a", "A"), ok("b", "B"), ok("c", "C")])
    outage = CrawlHealth(healthy=False, complete=True, why="every URL of its list failed")
    # A CDN answering 404 to a, a 503 for b, and c not reached at all.
    down = record(sessions, pipeline, "run-2", [failed("a", 404), failed("b", 503)], health=outage)
    assert (down.removed, down.skipped, down.changes) == (0, 2, [])
    back = record(sessions, pipeline, "run-3", [ok("a", "A"), ok("b", "B"), ok("c", "C")])
    assert (back.new, back.same, back.removed) == (0, 3, 0)
    assert timeline(sessions, pipeline[1]) == [("a", "new"), ("b", "new"), ("c", "new")]


def test_the_same_crawl_recorded_twice_appends_once(sessions, pipeline):
    record(sessions, pipeline, "run-1", [ok("a", "A")])
    record(sessions, pipeline, "run-2", [ok("a", "A2"), ok("b", "B")])
    retry = record(sessions, pipeline, "run-2", [ok("a", "A2"), ok("b", "B")])
    assert retry.already_recorded == 2 and (retry.new, retry.changed, retry.removed) == (0, 0, 0)
    assert len(timeline(sessions, pipeline[1])) == 3


def test_listing_filters_pages_and_stays_in_its_workspace(sessions, pipeline):
    record(sessions, pipeline, "run-1", [ok(f"u{n}", "x") for n in range(5)], now=T0)
    record(sessions, pipeline, "run-2", [ok(f"u{n}", "y") for n in range(3)], now=T0 + timedelta(days=1))
    workspace_id, pipeline_id = pipeline
    with sessions() as session:
        first, cursor = list_changes(session, workspace_id=workspace_id, pipeline_id=pipeline_id, limit=4)
        rest, end = list_changes(session, workspace_id=workspace_id, pipeline_id=pipeline_id, limit=6, before_id=cursor)
        assert len(first) == 4 and len(rest) == 6 and end is None
        assert [c.id for c in first + rest] == sorted((c.id for c in first + rest), reverse=True)
        removed, _ = list_changes(session, workspace_id=workspace_id, status="removed")
        assert sorted(c.url for c in removed) == ["u3", "u4"]
        recent, _ = list_changes(session, workspace_id=workspace_id, since=T0 + timedelta(hours=1))
        assert {c.status for c in recent} == {"changed", "removed"} and len(recent) == 5
        assert list_changes(session, workspace_id=workspace_id + 1000) == ([], None)


def test_pages_compared_in_batches_give_the_same_timeline(sessions, pipeline, monkeypatch):
    monkeypatch.setattr(page_changes, "BATCH_SIZE", 2)
    record(sessions, pipeline, "run-1", [ok(name, f"{name} text") for name in "abcde"])
    crawl = [ok("a", "a text"), ok("b", "b edited"), ok("a", "a again"), failed("c", 404), ok("f", "f text")]
    second = record(sessions, pipeline, "run-2", crawl)
    assert (second.same, second.changed, second.removed, second.new) == (1, 1, 3, 1)  # c gone; d, e unseen
    retry = record(sessions, pipeline, "run-2", crawl)
    assert retry.already_recorded == 4 and (retry.changed, retry.removed, retry.new) == (0, 0, 0)
    assert timeline(sessions, pipeline[1]).count(("d", "removed")) == 1
