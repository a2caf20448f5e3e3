"""A pipeline's documents over the API: states with archived ones marked, pages, and only the token's own workspace."""

from __future__ import annotations

import pytest

from tests.api.conftest import tenants_of
from tests.assets.conftest import Stack
from tests.assets.test_kb_archive import set_urls
from tests.support.web import page


@pytest.fixture
def library(embedded: Stack, client_for, tmp_path):
    """Workspace A's pipeline over 6 pages crawled twice: the second time /p5 left the list and /p4 answered 500
    (4 of 5 succeeded: healthy, so /p5 is archived); B's pipeline crawled once."""
    urls = embedded.site(6)
    a_workspace, a_pipeline = embedded.pipeline(urls)
    b_workspace, b_pipeline = embedded.pipeline(embedded.site(2, prefix="/b"))
    assert embedded.run(a_pipeline, a_workspace).success
    set_urls(embedded, a_pipeline, urls[:5])
    embedded.web.route("/p4", page("Down", "Server error.", status=500))
    second = embedded.run(a_pipeline, a_workspace)
    assert second.success and embedded.run(b_pipeline, b_workspace).success
    client, tenants = tenants_of(embedded, client_for, tmp_path / "data", {"a": a_workspace, "b": b_workspace})
    return client, tenants, {"a": a_pipeline, "b": b_pipeline}, second.run_id, urls


def test_documents_newest_first_with_archived_ones_marked(library):
    client, tenants, pipelines, second_run, urls = library
    a = tenants["a"]
    body = client.get(f"{a.pipelines}/{pipelines['a']}/documents", headers=a.headers).json()
    assert body["next_cursor"] is None
    documents = body["documents"]
    assert [d["id"] for d in documents] == sorted((d["id"] for d in documents), reverse=True)
    by_url = {d["url"]: d for d in documents}
    assert set(by_url) == set(urls)
    gone = by_url[urls[5]]
    assert (gone["state"], gone["archived_by_run_id"], gone["title"]) == ("archived", second_run, "Page 5")
    assert gone["archived_at"] and gone["updated_at"] and gone["folder_id"]
    failed = by_url[urls[4]]
    assert (failed["state"], failed["archived_at"], failed["archived_by_run_id"]) == ("failed", None, None)
    assert "500" in failed["reason"]
    assert {by_url[url]["state"] for url in urls[:4]} == {"ready"}
    assert "content" not in gone


def test_state_filter_and_pages(library):
    client, tenants, pipelines, _, urls = library
    a = tenants["a"]
    url = f"{a.pipelines}/{pipelines['a']}/documents"

    def states(**params):
        return [d["state"] for d in client.get(url, params=params, headers=a.headers).json()["documents"]]

    assert states(state="archived") == ["archived"]
    assert states(state="failed") == ["failed"]
    assert states(state="ready") == ["ready"] * 4
    assert states(state="pending") == []
    first = client.get(url, params={"state": "ready", "limit": 3}, headers=a.headers).json()
    assert len(first["documents"]) == 3 and first["next_cursor"]
    rest = client.get(url, params={"state": "ready", "limit": 3, "cursor": first["next_cursor"]}, headers=a.headers)
    assert len(rest.json()["documents"]) == 1 and rest.json()["next_cursor"] is None
    seen = {d["url"] for d in first["documents"] + rest.json()["documents"]}
    assert seen == set(urls[:4])


def test_invalid_filters_answer_422_per_field(library):
    client, tenants, pipelines, _, _ = library
    a = tenants["a"]
    answer = client.get(
        f"{a.pipelines}/{pipelines['a']}/documents",
        params={"state": "deleted", "limit": 0, "cursor": "x"},
        headers=a.headers,
    )
    assert answer.status_code == 422
    assert {error["field"] for error in answer.json()["detail"]} == {"state", "limit", "cursor"}


def test_another_workspaces_pipeline_is_not_found(library):
    client, tenants, pipelines, _, _ = library
    a, b = tenants["a"], tenants["b"]
    assert client.get(f"{a.pipelines}/{pipelines['b']}/documents", headers=a.headers).status_code == 404
    assert client.get(f"{b.pipelines}/{pipelines['a']}/documents", headers=a.headers).status_code == 404
    assert client.get(f"{b.pipelines}/{pipelines['b']}/documents", headers=a.headers).status_code == 404
    theirs = client.get(f"{b.pipelines}/{pipelines['b']}/documents", headers=b.headers).json()["documents"]
    assert len(theirs) == 2 and all("/b" in d["url"] for d in theirs)


def test_a_document_is_read_with_its_pages_markdown_in_its_own_workspace_only(library):
    client, tenants, pipelines, _, urls = library
    a, b = tenants["a"], tenants["b"]
    listed = client.get(f"{a.pipelines}/{pipelines['a']}/documents", headers=a.headers).json()["documents"]
    ready = next(d for d in listed if d["url"] == urls[0])
    path = f"{a.pipelines}/{pipelines['a']}/documents/{ready['id']}"
    answer = client.get(path, headers=a.headers)
    assert answer.status_code == 200, answer.text
    document = answer.json()
    # What the list shows of it, and the page's markdown and what extraction found about it.
    assert {key: document[key] for key in ready} == ready
    assert "Paragraph about topic 0." in document["content"] and "More on 0." in document["content"]
    assert document["metadata"]["title"] == "Page 0" and len(document["content_hash"]) == 64
    assert document["created_at"]
    # An archived document keeps its last content.
    archived = next(d for d in listed if d["state"] == "archived")
    kept = client.get(f"{a.pipelines}/{pipelines['a']}/documents/{archived['id']}", headers=a.headers).json()
    assert "Paragraph about topic 5." in kept["content"]

    # Another workspace's token, another pipeline's path, an unknown id: 404 with the reason.
    assert client.get(path, headers=b.headers).status_code == 404
    assert client.get(f"{b.pipelines}/{pipelines['a']}/documents/{ready['id']}", headers=b.headers).status_code == 404
    theirs = client.get(f"{b.pipelines}/{pipelines['b']}/documents", headers=b.headers).json()["documents"][0]["id"]
    missing = client.get(f"{a.pipelines}/{pipelines['a']}/documents/{theirs}", headers=a.headers)
    assert missing.status_code == 404
    assert missing.json() == {"detail": f"pipeline {pipelines['a']} has no document {theirs}"}
    unknown = client.get(f"{a.pipelines}/{pipelines['a']}/documents/999999", headers=a.headers)
    assert unknown.status_code == 404 and unknown.json()["detail"].endswith("has no document 999999")
    bad = client.get(f"{a.pipelines}/{pipelines['a']}/documents/0", headers=a.headers)
    assert bad.status_code == 422 and [e["field"] for e in bad.json()["detail"]] == ["document_id"]
