"""The chat tools over the Model Context Protocol, on stdio or streamable HTTP, each request answering only for
its API token's workspace, as the HTTP API does; `pipelines-dagster mcp` (cli/serve.py) starts it."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog.workspaces import InvalidTokenError, workspace_of_token

# The SDK, the web stack and the tools (which load Dagster) are imported on use: the CLI imports this
# module to register its command, and its other commands do without them.
if TYPE_CHECKING:
    from mcp.server import Server, ServerRequestContext
    from starlette.types import ASGIApp, Receive, Scope, Send

    from pipelines_dagster.agent_tools import AgentTool
    from pipelines_dagster.history import RunHistory
    from pipelines_dagster.settings import Settings

TOKEN_ENV = "PIPELINES_MCP_TOKEN"
MCP_PATH = "/mcp"
# Where an HTTP request's workspace travels from the bearer check to the tool handlers.
WORKSPACE_CLAIM = "workspace_id"
INSTRUCTIONS = (
    "Tools over one workspace's web-crawl pipelines: their recent runs, the pages that changed, "
    "and what the crawls were charged. Every answer is about the workspace of the API token in use."
)

logger = logging.getLogger(__name__)

WorkspaceOf = Callable[["ServerRequestContext[Any]"], Awaitable[int]]
"""The workspace a request answers for: the stdio token's, or that of the HTTP request's own bearer token."""


@dataclass(frozen=True)
class WorkspaceTools:
    """Every chat tool, built for the workspace a request answers for."""

    history: RunHistory
    sessions: sessionmaker[Session]

    @classmethod
    def of_deployment(cls, settings: Settings, sessions: sessionmaker[Session]) -> WorkspaceTools:
        """The tools over the deployment's app database and Dagster instance."""
        from pipelines_dagster.history import RunHistory
        from pipelines_dagster.instance import dagster_instance

        history = RunHistory(dagster_instance(settings), sessions, ui_base_url=settings.dagster_url)
        return cls(history, sessions)

    def of(self, workspace_id: int) -> dict[str, AgentTool]:
        from pipelines_dagster.agent_tools import build_workspace_tools

        tools = build_workspace_tools(workspace_id=workspace_id, history=self.history, sessions=self.sessions)
        return {tool.name: tool for tool in tools}


def token_workspace(sessions: sessionmaker[Session], token: str) -> int:
    """The token's workspace (InvalidTokenError for an unknown or revoked one), noting its use as the API does."""
    with transaction(sessions) as session:
        return workspace_of_token(session, token)


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer` header; InvalidTokenError without one."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidTokenError("send the workspace's API token as `Authorization: Bearer <token>`")
    return token.strip()


def build_server(tools: WorkspaceTools, workspace_of: WorkspaceOf) -> Server[Any]:
    """An MCP server listing and calling the tools of each request's workspace; a tool answers in text with its
    data as structured content, and bad arguments (an unknown pipeline too) as an error result whose text says
    what to fix, so the model can correct them."""
    import mcp_types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    async def request_tools(ctx: ServerRequestContext[Any]) -> dict[str, AgentTool]:
        return tools.of(await workspace_of(ctx))

    async def list_tools(
        ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = (await request_tools(ctx)).values()
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=tool.parameters,
                    output_schema=tool.output_schema,
                )
                for tool in listed
            ]
        )

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        listed = await request_tools(ctx)
        tool = listed.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"no tool named {params.name!r}; the tools are {', '.join(listed)}")
        # The tools query the databases: in a worker thread, so a slow answer holds up no other request.
        try:
            answer = await anyio.to_thread.run_sync(functools.partial(tool.answer, **(params.arguments or {})))
        except Exception:
            # A tool answers bad arguments itself; anything else is ours, and its text (a query, a path) is for
            # the log, not the client.
            logger.exception("tool %s failed", params.name)
            raise MCPError(types.INTERNAL_ERROR, f"{params.name} failed; the server log has the details") from None
        return types.CallToolResult(
            content=[types.TextContent(text=answer.text)], structured_content=answer.data, is_error=answer.is_error
        )

    return Server(
        "pipelines-dagster",
        version=importlib.metadata.version("pipelines-dagster"),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(tools: WorkspaceTools, token: str) -> None:
    """Serve one client on stdin/stdout until it closes stdin, answering for `token`'s workspace (each request
    checks the token again)."""
    import mcp_types as types
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError

    async def workspace_of(_ctx: ServerRequestContext[Any]) -> int:
        # Checked on every request, as the HTTP API checks each one: a revoked token stops answering at once.
        try:
            return await anyio.to_thread.run_sync(token_workspace, tools.sessions, token)
        except InvalidTokenError as exc:
            raise MCPError(types.INVALID_REQUEST, str(exc)) from None

    server = build_server(tools, workspace_of)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    # stdout is the protocol: logs go to stderr, and only warnings, so a client that shows stderr shows no chatter.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    anyio.run(serve)


def http_app(tools: WorkspaceTools, *, host: str, only_workspace: int | None) -> ASGIApp:
    """Streamable HTTP at /mcp, every request refused with a 401 unless its bearer token names a workspace
    (`only_workspace`, when given), and then answered for that workspace."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from starlette.datastructures import Headers
    from starlette.responses import JSONResponse

    async def workspace_of(ctx: ServerRequestContext[Any]) -> int:
        # Every message over HTTP carries the request it came in, which `authenticated` below let through.
        assert ctx.request is not None
        workspace_id: int = ctx.request.user.access_token.claims[WORKSPACE_CLAIM]
        return workspace_id

    # `host` decides the SDK's DNS-rebinding protection: on for a loopback address.
    app = build_server(tools, workspace_of).streamable_http_app(streamable_http_path=MCP_PATH, host=host)

    async def authenticated(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            # The lifespan, which starts the SDK's session manager.
            await app(scope, receive, send)
            return
        try:
            token = bearer_token(Headers(scope=scope).get("authorization"))
            workspace_id = await anyio.to_thread.run_sync(token_workspace, tools.sessions, token)
            if only_workspace is not None and workspace_id != only_workspace:
                raise InvalidTokenError(
                    "this server serves only the workspace of the token it was started with; "
                    "use a token of that workspace"
                )
        except InvalidTokenError as exc:
            refusal = JSONResponse({"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await refusal(scope, receive, send)
            return
        # The SDK binds each MCP session to this principal: another workspace's token cannot use it.
        scope["user"] = AuthenticatedUser(
            AccessToken(
                token=token,
                client_id=f"workspace-{workspace_id}",
                scopes=[],
                claims={WORKSPACE_CLAIM: workspace_id},
            )
        )
        await app(scope, receive, send)

    return authenticated


def serve_http(tools: WorkspaceTools, settings: Settings, *, host: str, port: int, only_workspace: int | None) -> None:
    """Serve streamable HTTP at `MCP_PATH` on host:port under the deployment's request limits, until stopped."""
    from pipelines_dagster.edge.limits import RequestLimits
    from pipelines_dagster.edge.server import serve

    app = http_app(tools, host=host, only_workspace=only_workspace)
    bounded = RequestLimits(app, max_headers=settings.max_headers, max_body_bytes=settings.max_body_bytes)
    serve(bounded, host=host, port=port, settings=settings)
