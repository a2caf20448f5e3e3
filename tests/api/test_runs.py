"""Run history, run detail and the result blob over real runs of the assets, scoped to the token's workspace."""

from __future__ import annotations

import uuid

import pytest

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog.pipelines import set_pipeline_enabled
from pipelines_dagster.launch import GraphQLLauncher
from pipelines_dagster.settings import DEFAULT_DAGSTER_URL
from tests.api.conftest import Tenant, free_port, issue_token, stack_settings
from tests.assets.conftest import Stack


@pytest.fixture
def crawled(stack: Stack, client_for, tmp_path):
    """Two workspaces, each with a pipeline that ran once for real; A's second run failed (disabled)."""
    urls = stack.site(4)
    a_workspace, a_pipeline = stack.pipeline([*urls, stack.web.url("/missing")])
    b_workspace, b_pipeline = stack.pipeline(urls, save_to_kb=False, folder=None)
    a_ok = stack.run(a_pipeline, a_workspace)
    b_ok = stack.run(b_pipeline, b_workspace, trigger="scheduled")
    with transaction(stack.sessions) as session:
        set_pipeline_enabled(session, workspace_id=a_workspace, pipeline_id=a_pipeline, enabled=False)
    a_failed = stack.run(a_pipeline, a_workspace)
    assert a_ok.success and b_ok.success and not a_failed.success
    client = client_for(
        stack_settings(stack, tmp_path / "data"), stack.instance, GraphQLLauncher(f"http://127.0.0.1:{free_port()}")
    )
    tenants = {
        name: Tenant(workspace_id, issue_token(stack.sessions, workspace_id))
        for name, workspace_id in (("a", a_workspace), ("b", b_workspace))
    }
    return (
        client,
        tenants,
        {"a": a_pipeline, "b": b_pipeline},
        {"a_ok": a_ok.run_id, "a_failed": a_failed.run_id, "b_ok": b_ok.run_id},
    )


def test_runs_list_detail_and_result(crawled, stack: Stack):
    client, tenants, pipelines, runs = crawled
    a = tenants["a"]
    base = f"{a.pipelines}/{pipelines['a']}/runs"
    page = client.get(base, headers=a.headers).json()
    assert [run["run_id"] for run in page["runs"]] == [runs["a_failed"], runs["a_ok"]]
    assert page["next_cursor"] is None
    failed, ok = page["runs"]
    expected = {
        "status": "succeeded",
        "trigger": "manual",
        "pipeline_id": pipelines["a"],
        "workspace_id": a.workspace_id,
        "crawls_attempted": 5,
        "crawls_succeeded": 4,
        "crawls_failed": 1,
        "documents_created": 4,
    }
    assert {key: ok[key] for key in expected} == expected
    assert failed["status"] == "failed" and "disabled" in failed["error"] and failed["blob_key"] is None
    # No PIPELINES_DAGSTER_URL: each run links to its page on the default webserver.
    assert [run["dagster_url"] for run in page["runs"]] == [
        f"{DEFAULT_DAGSTER_URL}/runs/{run['run_id']}" for run in page["runs"]
    ]

    detail = client.get(f"{base}/{runs['a_ok']}", headers=a.headers).json()
    assert {k: v for k, v in detail.items() if k != "steps"} == ok
    assert {step["step_key"] for step in detail["steps"]} == {"crawl_results", "kb_documents"}

    result = client.get(f"{base}/{runs['a_ok']}/result", headers=a.headers)
    assert result.status_code == 200 and result.headers["content-type"].startswith("application/x-ndjson")
    assert result.content == b"".join(stack.blob.open_stream(ok["blob_key"]))
    assert sorted(line.count(b'"status":"success"') for line in result.content.splitlines()) == [0, 1, 1, 1, 1]

    missing = client.get(f"{base}/{runs['a_failed']}/result", headers=a.headers)
    assert missing.status_code == 404 and "kept no crawl result" in missing.json()["detail"]
    stack.blob.delete(ok["blob_key"])
    pruned = client.get(f"{base}/{runs['a_ok']}/result", headers=a.headers)
    assert pruned.status_code == 404 and "no longer stored" in pruned.json()["detail"]


def test_limit_cursor_and_status_pass_through(crawled):
    client, tenants, pipelines, runs = crawled
    a = tenants["a"]
    base = f"{a.pipelines}/{pipelines['a']}/runs"
    first = client.get(base, headers=a.headers, params={"limit": 1}).json()
    assert [run["run_id"] for run in first["runs"]] == [runs["a_failed"]] and first["next_cursor"]
    second = client.get(base, headers=a.headers, params={"limit": 1, "cursor": first["next_cursor"]}).json()
    assert [run["run_id"] for run in second["runs"]] == [runs["a_ok"]] and second["next_cursor"] is None
    succeeded = client.get(base, headers=a.headers, params={"status": "succeeded"}).json()["runs"]
    assert [run["run_id"] for run in succeeded] == [runs["a_ok"]]
    for params in ({"limit": 0}, {"limit": 101}, {"status": "done"}, {"cursor": "../x"}):
        response = client.get(base, headers=a.headers, params=params)
        assert response.status_code == 422 and [e["field"] for e in response.json()["detail"]] == list(params)


def test_a_token_never_reaches_another_workspace_runs_or_blobs(crawled):
    client, tenants, pipelines, runs = crawled
    a, b = tenants["a"], tenants["b"]
    theirs = f"{b.pipelines}/{pipelines['b']}"
    for path in (theirs, f"{theirs}/runs", f"{theirs}/runs/{runs['b_ok']}", f"{theirs}/runs/{runs['b_ok']}/result"):
        response = client.get(path, headers=a.headers)
        assert response.status_code == 404 and response.json() == {"detail": f"workspace {b.workspace_id} not found"}
    # B's ids under A's own workspace: the pipeline is not A's, and A's pipeline never ran B's run.
    mine = f"{a.pipelines}/{pipelines['a']}"
    for path in (
        f"{a.pipelines}/{pipelines['b']}/runs",
        f"{a.pipelines}/{pipelines['b']}/runs/{runs['b_ok']}/result",
        f"{mine}/runs/{runs['b_ok']}",
        f"{mine}/runs/{runs['b_ok']}/result",
        f"{mine}/runs/{uuid.uuid4()}",
    ):
        assert client.get(path, headers=a.headers).status_code == 404, path
    # And B still sees its own.
    own = client.get(f"{theirs}/runs/{runs['b_ok']}", headers=b.headers).json()
    assert own["trigger"] == "scheduled" and own["documents_created"] is None
    assert client.get(f"{theirs}/runs/{runs['b_ok']}/result", headers=b.headers).status_code == 200
