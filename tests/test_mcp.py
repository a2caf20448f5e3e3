"""`pipelines-dagster mcp` through the official SDK's own client, over stdio and streamable HTTP: the
chat tools listed and called, each answering in text and structured content for its token's workspace only;
bad arguments and another workspace's pipeline answered as errors; wrong tokens refused."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import anyio
import httpx
import pytest

from pipelines_dagster.agent_tools import ToolAnswer, build_workspace_tools
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.core.catalog.workspaces import create_api_token
from pipelines_dagster.mcp_server import MCP_PATH, TOKEN_ENV
from tests.assets.conftest import Stack, embedded, web  # noqa: F401  (fixtures)
from tests.support.dagster_dev import BIN, REPO_DIR
from tests.support.processes import stop_group
from tests.test_history import UI, history

pytestmark = pytest.mark.integration

TOOLS = {"get_pipeline_runs", "get_page_changes", "get_cost_totals"}


def two_workspaces(embedded: Stack) -> dict[str, tuple[int, int, str]]:
    """Ours (two pages crawled twice, one of them changed) and theirs (one page): each (workspace id,
    pipeline id, API token), with runs, page changes and charges in both."""
    embedded.billing_enabled = True
    assets = [crawl_results, kb_documents, page_changes]
    ours, docs = embedded.pipeline(embedded.site(2), credit=100_000)
    theirs, their_pipeline = embedded.pipeline(embedded.site(1, prefix="/q"), credit=100_000)
    for pipeline_id, workspace_id in ((docs, ours), (their_pipeline, theirs), (docs, ours)):
        assert embedded.run(pipeline_id, workspace_id, assets=assets).success
    with transaction(embedded.sessions) as session:
        tokens = {ws: create_api_token(session, ws, name="mcp").token for ws in (ours, theirs)}
    return {"ours": (ours, docs, tokens[ours]), "theirs": (theirs, their_pipeline, tokens[theirs])}


def server_env(embedded: Stack, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The command's settings: the test's app database and Dagster instance."""
    env = {
        **os.environ,
        "PIPELINES_DATA_DIR": str(tmp_path / "data"),
        "PIPELINES_DATABASE_URL": embedded.url,
        "DAGSTER_HOME": embedded.instance.root_directory,
        # The base of the run links both sides show.
        "PIPELINES_DAGSTER_URL": UI,
    }
    env.pop(TOKEN_ENV, None)
    return env | extra


def expected_answers(embedded: Stack, workspace_id: int, calls: list[tuple[str, dict]]) -> list[ToolAnswer]:
    """What the in-process chat tools answer for the workspace: the MCP server must answer the same."""
    tools = {
        tool.name: tool
        for tool in build_workspace_tools(
            workspace_id=workspace_id, history=history(embedded), sessions=embedded.sessions
        )
    }
    return [tools[name].answer(**arguments) for name, arguments in calls]


async def listed_and_called(session, calls: list[tuple[str, dict]]) -> tuple[set[str], list[ToolAnswer]]:
    """The tools listed (each with an output schema) and each call's answer as the client reads it; the SDK's
    client checks a result's structured content against its tool's output schema."""
    await session.initialize()
    listed = await session.list_tools()
    assert all(tool.output_schema["type"] == "object" for tool in listed.tools)
    answers = []
    for name, arguments in calls:
        result = await session.call_tool(name, arguments)
        [content] = result.content
        answers.append(ToolAnswer(text=content.text, data=result.structured_content, is_error=result.is_error))
    return {tool.name for tool in listed.tools}, answers


def calls_for(workspace: tuple[int, int, str], other: tuple[int, int, str]) -> list[tuple[str, dict]]:
    _, pipeline_id, _ = workspace
    _, other_pipeline, _ = other
    return [
        ("get_pipeline_runs", {}),
        ("get_page_changes", {}),
        ("get_page_changes", {"pipeline_id": other_pipeline}),
        ("get_cost_totals", {}),
        ("get_cost_totals", {"pipeline_id": pipeline_id, "since": "2020-01-01"}),
        ("get_pipeline_runs", {"pipeline_id": other_pipeline}),
        ("get_cost_totals", {"pipeline_id": other_pipeline}),
        # Bad arguments: a wrong type, out of range, not a time, not an argument.
        ("get_pipeline_runs", {"pipeline_id": str(pipeline_id)}),
        ("get_pipeline_runs", {"limit": 0}),
        ("get_page_changes", {"limit": 101}),
        ("get_cost_totals", {"since": "soon"}),
        ("get_pipeline_runs", {"workspace_id": 1}),
    ]


def assert_only_its_workspace(
    answers: list[ToolAnswer], workspace: tuple[int, int, str], other: tuple[int, int, str]
) -> None:
    workspace_id, pipeline_id, _ = workspace
    runs, changes, other_changes, costs, _, other_runs, other_costs, *bad = answers
    assert [answer.is_error for answer in (runs, changes, costs)] == [False] * 3
    assert len(runs.text.splitlines()) >= 1 and "succeeded" in runs.text
    # The same answer as data: the runs and changes of this workspace's pipeline, its charges.
    assert {run["status"] for run in runs.data["runs"]} == {"succeeded"}
    assert {(run["workspace_id"], run["pipeline_id"]) for run in runs.data["runs"]} == {(workspace_id, pipeline_id)}
    assert len(runs.data["runs"]) == len(runs.text.splitlines())
    assert changes.text != "No page changes recorded." and all(
        f"pipeline {pipeline_id}" in line for line in changes.text.splitlines()
    )
    assert {change["pipeline_id"] for change in changes.data["changes"]} == {pipeline_id}
    assert f"pipeline {other[1]}" not in changes.text
    assert "micro-credits" in costs.text and not costs.text.startswith("0 micro-credits")
    assert costs.data["micros"] > 0 and costs.data["workspace_id"] == workspace_id
    assert costs.text.startswith(f"{costs.data['micros']} micro-credits")
    # Another workspace's pipeline is not this workspace's: an error saying so, not an empty answer.
    for answer in (other_changes, other_runs, other_costs):
        assert answer.is_error and answer.data is None
        assert f"no such pipeline in this workspace: {other[1]}" in answer.text
    wrong_type, too_few, too_many, not_a_time, not_an_argument = bad
    assert all(answer.is_error and answer.data is None for answer in bad)
    assert wrong_type.text.startswith("Invalid arguments for get_pipeline_runs: pipeline_id: Input should be a valid")
    assert "limit: Input should be greater than or equal to 1" in too_few.text
    assert "limit: Input should be less than or equal to 100" in too_many.text
    assert not_a_time.text.startswith("Invalid arguments for get_cost_totals: since:")
    assert "workspace_id is not an argument of this tool (it takes only pipeline_id, limit)" in not_an_argument.text


def test_an_sdk_client_over_stdio_lists_and_calls_the_tools_of_its_tokens_workspace(embedded: Stack, tmp_path):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    workspaces = two_workspaces(embedded)
    ours, theirs = workspaces["ours"], workspaces["theirs"]
    calls = calls_for(ours, theirs)
    expected = expected_answers(embedded, ours[0], calls)

    async def session_over_stdio() -> tuple[set[str], list[ToolAnswer]]:
        server = StdioServerParameters(
            command=str(BIN / "pipelines-dagster"),
            args=["mcp"],
            env=server_env(embedded, tmp_path, **{TOKEN_ENV: ours[2]}),
            cwd=REPO_DIR,
        )
        with (tmp_path / "stdio-server.log").open("w") as errlog:
            async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                return await listed_and_called(session, calls)

    names, answers = anyio.run(session_over_stdio)
    assert names == TOOLS
    assert answers == expected
    assert_only_its_workspace(answers, ours, theirs)


def test_a_wrong_token_is_refused_before_stdio_serves_anything(embedded: Stack, tmp_path):
    for token, reason in (("pdk_not-a-token", "the API token is not valid"), (None, f"${TOKEN_ENV}")):
        env = server_env(embedded, tmp_path)
        if token is not None:
            env[TOKEN_ENV] = token
        done = subprocess.run(
            [str(BIN / "pipelines-dagster"), "mcp"],
            env=env,
            cwd=REPO_DIR,
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0 and reason in done.stderr, done.stderr
        assert done.stdout == ""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_sdk_client_over_streamable_http_answers_for_each_requests_bearer_token(embedded: Stack, tmp_path):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    workspaces = two_workspaces(embedded)
    ours, theirs = workspaces["ours"], workspaces["theirs"]
    port = free_port()
    url = f"http://127.0.0.1:{port}{MCP_PATH}"
    log = tmp_path / "http-server.log"
    process = subprocess.Popen(
        [str(BIN / "pipelines-dagster"), "mcp", "--http", "--port", str(port)],
        env=server_env(embedded, tmp_path),
        cwd=REPO_DIR,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                unauthenticated = httpx.post(url, json={}, timeout=3)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the MCP server did not start:\n{log.read_text()[-3000:]}", pytrace=False)
                time.sleep(0.2)
        # No token, or a wrong one: 401 with the reason, before any MCP message is read.
        assert unauthenticated.status_code == 401 and "Authorization: Bearer" in unauthenticated.json()["detail"]
        wrong = httpx.post(url, json={}, headers={"Authorization": "Bearer pdk_wrong"}, timeout=10)
        assert wrong.status_code == 401 and "not valid" in wrong.json()["detail"]
        assert wrong.headers["www-authenticate"] == "Bearer"

        async def session_over_http(token: str, calls: list[tuple[str, dict]]) -> tuple[set[str], list[ToolAnswer]]:
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with (
                client,
                streamable_http_client(url, http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                return await listed_and_called(session, calls)

        for workspace, other in ((ours, theirs), (theirs, ours)):
            calls = calls_for(workspace, other)
            names, answers = anyio.run(session_over_http, workspace[2], calls)
            assert names == TOOLS
            assert answers == expected_answers(embedded, workspace[0], calls)
            assert_only_its_workspace(answers, workspace, other)
    finally:
        stop_group(process)


def test_a_failing_tool_reaches_the_client_as_an_error_without_its_text():
    import pydantic
    from mcp import Client

    from pipelines_dagster.agent_tools import AgentTool
    from pipelines_dagster.mcp_server import WorkspaceTools, build_server

    class NoArguments(pydantic.BaseModel):
        pass

    def leak(_arguments: NoArguments) -> NoArguments:
        raise RuntimeError("SELECT secret FROM credit_ledger WHERE workspace_id = 2")

    class Failing(WorkspaceTools):
        def of(self, workspace_id: int) -> dict[str, AgentTool]:
            return {"leak": AgentTool("leak", "Fails.", NoArguments, NoArguments, leak, str)}

    async def workspace_of(_ctx) -> int:
        return 1

    async def call() -> str:
        # Over JSON-RPC, as on stdio and HTTP, where the SDK would send an exception's own text.
        server = build_server(Failing(history=None, sessions=None), workspace_of)
        async with Client(server, mode="legacy") as client:
            with pytest.raises(Exception) as failed:
                await client.call_tool("leak", {})
            return str(failed.value)

    message = anyio.run(call)
    assert "leak failed; the server log has the details" in message
    assert "SELECT" not in message and "credit_ledger" not in message
