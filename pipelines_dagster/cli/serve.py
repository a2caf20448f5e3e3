"""`pipelines-dagster api` and `mcp`: the HTTP API under uvicorn, and the chat tools over MCP (stdio or HTTP)."""

from __future__ import annotations

import click

from pipelines_dagster import mcp_server
from pipelines_dagster.cli.common import open_sessions, user_errors
from pipelines_dagster.settings import load_settings

# Each server's default port is its own, so any two run side by side as they come.
API_PORT = 8000
MCP_HTTP_PORT = 8100


@click.command("api")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=API_PORT, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@user_errors
def api(host: str, port: int) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) with uvicorn."""
    settings = load_settings()
    settings.require_deployment()
    # Imported on use: the web stack and Dagster, which the app loads, serve this command only.
    from pipelines_dagster.api.app import create_app
    from pipelines_dagster.edge.server import serve

    serve(create_app(settings=settings), host=host, port=port, settings=settings)


@click.command("mcp")
@click.option(
    "--token",
    envvar=mcp_server.TOKEN_ENV,
    show_envvar=True,
    default=None,
    help=f"A workspace API token. Prefer ${mcp_server.TOKEN_ENV}: a command line is visible to anyone running "
    "`ps`. Required on stdio; with --http, only that token's workspace is served.",
)
@click.option(
    "--http",
    "over_http",
    is_flag=True,
    help=f"Serve streamable HTTP at {mcp_server.MCP_PATH}; every request sends `Authorization: Bearer "
    "<workspace token>`.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="With --http: the address to listen on.")
@click.option(
    "--port",
    default=MCP_HTTP_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="With --http: the port to listen on (off the other defaults: 3000 the UI, 8000 the API, 8765 the demo site).",
)
@user_errors
def mcp(token: str | None, over_http: bool, host: str, port: int) -> None:
    """Serve the chat tools (runs, page changes, cost totals) over MCP, answering for one token's workspace.

    On stdio (the default) the client starts this command and the token is its workspace's; with
    --http, each request's bearer token decides its workspace.
    """
    if token is None and not over_http:
        raise click.UsageError(f"give the workspace's API token in ${mcp_server.TOKEN_ENV} (or --token)")
    settings = load_settings()
    sessions = open_sessions(settings)
    token_workspace_id = mcp_server.token_workspace(sessions, token) if token is not None else None
    tools = mcp_server.WorkspaceTools.of_deployment(settings, sessions)
    if over_http:
        mcp_server.serve_http(tools, settings, host=host, port=port, only_workspace=token_workspace_id)
    else:
        assert token is not None  # required without --http, above
        mcp_server.serve_stdio(tools, token)
