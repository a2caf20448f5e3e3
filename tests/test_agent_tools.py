"""The chat agent's run-history and page-change tools, over real runs: scoped to its workspace when
built, answering in text."""

from __future__ import annotations

import json

import pytest

from pipelines_dagster.agent_tools import build_cost_tools, build_page_change_tools, build_pipeline_run_tools
from pipelines_dagster.app_db.engine import create_engine, session_factory
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from tests.assets.conftest import Stack, embedded, web  # noqa: F401
from tests.support.web import page
from tests.test_history import history, rename


def test_no_workspace_no_tool(embedded: Stack):
    assert build_pipeline_run_tools(workspace_id=None, history=history(embedded), sessions=embedded.sessions) == []


def test_the_spec_is_a_function_calling_tool_without_a_workspace_argument(embedded: Stack):
    [tool] = build_pipeline_run_tools(workspace_id=1, history=history(embedded), sessions=embedded.sessions)
    spec = tool.spec()
    assert spec["type"] == "function" and spec["function"]["name"] == tool.name == "get_pipeline_runs"
    assert spec["function"]["description"] == tool.description
    parameters = spec["function"]["parameters"]
    assert parameters == tool.parameters and json.loads(json.dumps(parameters)) == parameters
    assert parameters["type"] == "object" and parameters["additionalProperties"] is False
    assert set(parameters["properties"]) == {"pipeline_id", "limit"}
    assert {"type": "null"} in parameters["properties"]["pipeline_id"]["anyOf"]
    limit = parameters["properties"]["limit"]
    assert (limit["type"], limit["minimum"], limit["maximum"], limit["default"]) == ("integer", 1, 100, 20)


def test_runs_render_one_line_each_and_only_the_workspaces_own(embedded: Stack):
    urls = embedded.site(2)
    ours, docs = embedded.pipeline(urls)
    theirs, their_pipeline = embedded.pipeline(urls)
    rename(embedded, docs, "Docs nightly")
    runs = [embedded.run(docs, ours, trigger="scheduled") for _ in range(3)]
    embedded.run(their_pipeline, theirs)
    [tool] = build_pipeline_run_tools(workspace_id=ours, history=history(embedded), sessions=embedded.sessions)

    lines = tool().splitlines()
    assert len(lines) == 3
    finished = history(embedded).get_run(ours, runs[-1].run_id).finished_at
    assert lines[0] == f"Docs nightly • succeeded • scheduled • {finished:%Y-%m-%d %H:%M} UTC • 2 docs / 2 crawls"
    assert tool(limit=2).splitlines() == lines[:2]
    assert tool(pipeline_id=docs, limit=1).splitlines() == lines[:1]
    assert tool(pipeline_id=None, limit=100).splitlines() == lines
    # Another workspace's pipeline is no pipeline of this one: an error that says so, not "no runs".
    refused = tool.answer(pipeline_id=their_pipeline)
    assert refused.is_error and refused.data is None
    assert refused.text == (
        f"get_pipeline_runs: no such pipeline in this workspace: {their_pipeline}; "
        "leave pipeline_id out for all of its pipelines"
    )
    # The answer as data: the runs the lines show, newest first.
    answer = tool.answer(limit=2)
    assert not answer.is_error and answer.text.splitlines() == lines[:2]
    assert [run["run_id"] for run in answer.data["runs"]] == [run.run_id for run in runs[::-1][:2]]


def test_a_failed_run_shows_its_reason(embedded: Stack):
    workspace_id, pipeline_id = embedded.pipeline(embedded.site(1), enabled=False)
    embedded.run(pipeline_id, workspace_id, trigger="webhook")
    [tool] = build_pipeline_run_tools(workspace_id=workspace_id, history=history(embedded), sessions=embedded.sessions)
    [line] = tool().splitlines()
    assert line.startswith("p • failed • webhook • ")
    assert line.endswith(f" • no docs / no crawls • pipeline {pipeline_id} is disabled; enable it before running it")


def test_bad_arguments_come_back_as_errors_saying_what_to_fix(embedded: Stack):
    workspace_id, _pipeline_id = embedded.pipeline(embedded.site(1))
    theirs, their_pipeline = embedded.pipeline(embedded.site(1, prefix="/q"))
    embedded.run(their_pipeline, theirs)
    [tool] = build_pipeline_run_tools(workspace_id=workspace_id, history=history(embedded), sessions=embedded.sessions)

    answer = tool(workspace_id=theirs)
    assert answer.startswith("Invalid arguments for get_pipeline_runs: workspace_id is not an argument")
    assert "pipeline_id, limit" in answer
    assert "limit: Input should be greater than or equal to 1" in tool(limit=0)
    assert "limit: Input should be less than or equal to 100" in tool(limit=101)
    assert "pipeline_id: Input should be a valid integer" in tool(pipeline_id="7")
    for bad in ({"workspace_id": theirs}, {"limit": 0}, {"limit": 101}, {"pipeline_id": "7"}):
        assert tool.answer(**bad).is_error, bad
    empty = tool.answer()
    assert (empty.text, empty.data, empty.is_error) == ("No pipeline runs yet.", {"runs": []}, False)


def test_page_changes_tool_is_scoped_to_its_workspace(embedded: Stack):
    assets = [crawl_results, kb_documents, page_changes]
    urls = embedded.site(2)
    ours, docs = embedded.pipeline(urls)
    theirs, their_pipeline = embedded.pipeline(embedded.site(1, prefix="/q"))
    embedded.run(docs, ours, assets=assets)
    embedded.web.route("/p1", page("Page 1", "Rewritten."))
    embedded.run(docs, ours, assets=assets)
    embedded.run(their_pipeline, theirs, assets=assets)
    assert build_page_change_tools(workspace_id=None, sessions=embedded.sessions) == []
    [tool] = build_page_change_tools(workspace_id=ours, sessions=embedded.sessions)
    assert tool.spec()["function"]["name"] == "get_page_changes"
    assert set(tool.parameters["properties"]) == {"pipeline_id", "status", "limit"}

    lines = tool().splitlines()
    assert len(lines) == 3 and all(f"pipeline {docs}" in line for line in lines)
    assert lines[0].split(" • ")[1:] == ["changed", urls[1], f"pipeline {docs}", "+1 -2 lines"]
    assert tool(status="new", limit=1).splitlines() == lines[1:2]
    assert tool.answer(pipeline_id=their_pipeline).is_error
    assert "no such pipeline in this workspace" in tool(pipeline_id=their_pipeline)
    assert [change["url"] for change in tool.answer().data["changes"]] == [line.split(" • ")[2] for line in lines]
    [their_tool] = build_page_change_tools(workspace_id=theirs, sessions=embedded.sessions)
    assert "/q0" in their_tool() and str(urls[0]) not in their_tool()
    assert tool(status="same").startswith("Invalid arguments for get_page_changes: status:")
    assert "limit is not an argument" not in tool(limit="5") and tool(limit="5").startswith("Invalid arguments")


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        # UTC cannot hold these; the database driver used to refuse them with the statement in its error.
        ({"until": "9999-12-31T23:00:00-05:00"}, "until"),
        ({"since": "0001-01-01T00:00:00+05:00"}, "since"),
        ({"since": 99999999999}, "since"),
        ({"since": "1700000000"}, "since"),
        ({"pipeline_id": 2**63}, "pipeline_id"),
        ({"pipeline_id": True}, "pipeline_id"),
        ({"pipeline_id": 0}, "pipeline_id"),
    ],
)
def test_the_cost_tool_names_a_bad_argument_and_never_shows_sql(sessions, arguments, named):
    [tool] = build_cost_tools(workspace_id=1, sessions=sessions)
    answer = tool.answer(**arguments)
    assert answer.is_error and answer.data is None
    assert answer.text.startswith(f"Invalid arguments for get_cost_totals: {named}:"), answer
    assert "select" not in answer.text.lower() and "[SQL" not in answer.text


def test_a_database_error_is_answered_without_its_statement(tmp_path):
    # Never migrated: every query fails, and the driver's error carries the statement.
    engine = create_engine(f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    [tool] = build_cost_tools(workspace_id=1, sessions=session_factory(engine))
    answer = tool(since="2026-01-01T00:00:00Z")
    assert answer == "get_cost_totals could not read the app database just now; try again shortly"
