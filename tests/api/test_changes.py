"""The page-change timeline over the API: filters, pages, and only the token's own workspace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from tests.api.conftest import tenants_of
from tests.assets.conftest import Stack, set_pipeline
from tests.support.web import page

ALL = [crawl_results, kb_documents, page_changes]


@pytest.fixture
def timeline(embedded: Stack, client_for, tmp_path):
    """Workspace A's pipeline crawled twice (4 new, then 1 changed and 1 removed); B's crawled once."""
    urls = embedded.site(4)
    a_workspace, a_pipeline = embedded.pipeline(urls)
    # 3 of 4 pages answer in the second crawl: healthy at this threshold, so its 410 is a removal.
    set_pipeline(embedded, a_pipeline, config={"MIN_SUCCESS_RATIO": 0.75})
    b_workspace, b_pipeline = embedded.pipeline(embedded.site(2, prefix="/b"))
    first = embedded.run(a_pipeline, a_workspace, assets=ALL)
    embedded.web.route("/p0", page("Page 0", "Edited."))
    embedded.web.route("/p3", page("Page 3", "gone", status=410))
    second = embedded.run(a_pipeline, a_workspace, assets=ALL)
    assert first.success and second.success and embedded.run(b_pipeline, b_workspace, assets=ALL).success
    client, tenants = tenants_of(embedded, client_for, tmp_path / "data", {"a": a_workspace, "b": b_workspace})
    return client, tenants, {"a": a_pipeline, "b": b_pipeline}, second.run_id, urls


def test_changes_newest_first_with_diffs(timeline):
    client, tenants, pipelines, second_run, urls = timeline
    a = tenants["a"]
    body = client.get(f"{a.pipelines}/{pipelines['a']}/changes", headers=a.headers).json()
    assert body["next_cursor"] is None
    changes = body["changes"]
    # Within one crawl the order is the blob's, which is the order the pages answered in.
    assert {(c["url"], c["status"]) for c in changes[:2]} == {(urls[3], "removed"), (urls[0], "changed")}
    assert [c["status"] for c in changes[2:]] == ["new"] * 4
    assert [c["id"] for c in changes] == sorted((c["id"] for c in changes), reverse=True)
    changed = next(c for c in changes if c["status"] == "changed")
    assert changed["run_id"] == second_run and "+Edited." in changed["diff"] and changed["document_id"]
    assert changed["previous_hash"] != changed["current_hash"]


def test_filters_and_pages(timeline):
    client, tenants, pipelines, _, _urls = timeline
    a = tenants["a"]
    url = f"{a.pipelines}/{pipelines['a']}/changes"
    new = client.get(url, params={"status": "new", "limit": 3}, headers=a.headers).json()
    assert len(new["changes"]) == 3 and new["next_cursor"]
    rest = client.get(url, params={"status": "new", "limit": 3, "cursor": new["next_cursor"]}, headers=a.headers)
    assert [c["status"] for c in rest.json()["changes"]] == ["new"] and rest.json()["next_cursor"] is None
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert client.get(url, params={"since": future}, headers=a.headers).json()["changes"] == []
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    assert len(client.get(url, params={"since": past}, headers=a.headers).json()["changes"]) == 6


def test_invalid_filters_answer_422_per_field(timeline):
    client, tenants, pipelines, _, _ = timeline
    a = tenants["a"]
    answer = client.get(
        f"{a.pipelines}/{pipelines['a']}/changes",
        params={"status": "same", "since": "2026-01-01T00:00:00", "cursor": "x"},
        headers=a.headers,
    )
    assert answer.status_code == 422
    assert {error["field"] for error in answer.json()["detail"]} == {"status", "since", "cursor"}
    number = client.get(f"{a.pipelines}/{pipelines['a']}/changes", params={"since": "0.5"}, headers=a.headers)
    assert number.status_code == 422 and "ISO 8601" in number.json()["detail"][0]["message"]


def test_another_workspaces_pipeline_is_not_found(timeline):
    client, tenants, pipelines, _, _ = timeline
    a, b = tenants["a"], tenants["b"]
    assert client.get(f"{a.pipelines}/{pipelines['b']}/changes", headers=a.headers).status_code == 404
    assert client.get(f"{b.pipelines}/{pipelines['a']}/changes", headers=a.headers).status_code == 404
    theirs = client.get(f"{b.pipelines}/{pipelines['b']}/changes", headers=b.headers).json()["changes"]
    assert len(theirs) == 2 and all("/b" in c["url"] for c in theirs)
