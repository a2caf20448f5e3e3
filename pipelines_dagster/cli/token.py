"""`pipelines-dagster token`: a workspace's named API tokens, each shown once when it is made."""

from __future__ import annotations

import click

from pipelines_dagster.api.schemas.tokens import NewTokenOut, TokenList, TokenOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.cli.common import ID, emit, json_option, open_sessions, user_errors, workspace_ref
from pipelines_dagster.core.catalog import workspaces
from pipelines_dagster.settings import load_settings

token_ref = workspace_ref("token", former_argument=False)


def _line(shown: TokenOut) -> str:
    used = shown.last_used_at.isoformat() if shown.last_used_at else "never"
    state = f"revoked {shown.revoked_at.isoformat()}" if shown.revoked_at else "live"
    return (
        f"{shown.id}\t{shown.name}\t{shown.prefix}…\tcreated {shown.created_at.isoformat()}\tlast used {used}\t{state}"
    )


@click.group()
def token() -> None:
    """A workspace's API tokens: several per workspace, each named, its secret shown once."""


@token.command("create")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--name", required=True, help="What the token is for (ci, chat-agent); unique among live tokens.")
@json_option
@user_errors
def token_create(workspace_id: int, name: str, as_json: bool) -> None:
    """Make a token and print it (shown this once: only its hash is stored)."""
    with transaction(open_sessions(load_settings())) as session:
        shown = NewTokenOut.of_new(workspaces.create_api_token(session, workspace_id, name=name))
    emit(
        as_json,
        shown,
        f"token {shown.id} ({shown.name}) of workspace {workspace_id} created\n"
        f"API token (shown once, store it now): {shown.token}",
    )


@token.command("list")
@click.option("--workspace", "workspace_id", required=True, type=ID)
@click.option("--include-revoked", is_flag=True, help="Revoked tokens too.")
@json_option
@user_errors
def token_list(workspace_id: int, include_revoked: bool, as_json: bool) -> None:
    """The workspace's tokens, oldest first: id, name, prefix, created, last used (without their secrets)."""
    with open_sessions(load_settings())() as session:
        rows = workspaces.list_api_tokens(session, workspace_id, include_revoked=include_revoked)
        shown = TokenList(tokens=[TokenOut.of(row) for row in rows])
    emit(as_json, shown, "\n".join(map(_line, shown.tokens)) or f"workspace {workspace_id} has no live tokens")


@token.command("show")
@token_ref
@json_option
@user_errors
def token_show(workspace_id: int, token_id: int, as_json: bool) -> None:
    """One token: name, prefix, created, last used, revoked."""
    with open_sessions(load_settings())() as session:
        shown = TokenOut.of(workspaces.get_api_token(session, workspace_id, token_id))
    emit(as_json, shown, _line(shown))


@token.command("revoke")
@token_ref
@json_option
@user_errors
def token_revoke(workspace_id: int, token_id: int, as_json: bool) -> None:
    """Revoke a token: the API and the MCP server refuse it from the next request on."""
    with transaction(open_sessions(load_settings())) as session:
        shown = TokenOut.of(workspaces.revoke_api_token(session, workspace_id, token_id))
    emit(as_json, shown, f"token {shown.id} ({shown.name}) of workspace {workspace_id} revoked")
