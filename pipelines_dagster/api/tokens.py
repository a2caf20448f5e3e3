"""A workspace's API tokens, managed with one of its own tokens: list, make (the secret shown once), show,
revoke (refused from the next request on). Another workspace's tokens are not found, like the rest of it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas.tokens import NewTokenOut, TokenIn, TokenList, TokenOut
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog import workspaces
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}/tokens", tags=["tokens"])

TokenId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.get("", responses=responses(401, 404, 422))
def list_tokens(
    workspace_id: WorkspaceId,
    api: Api,
    include_revoked: Annotated[bool, Query(description="Revoked tokens too.")] = False,
) -> TokenList:
    """The workspace's tokens, oldest first, without their secrets."""
    with api.sessions() as session:
        rows = workspaces.list_api_tokens(session, workspace_id, include_revoked=include_revoked)
        return TokenList(tokens=[TokenOut.of(row) for row in rows])


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(401, 404, 409, 422))
def create_token(workspace_id: WorkspaceId, body: TokenIn, api: Api) -> NewTokenOut:
    """Make a named token of the workspace; its secret is shown this once (only its hash is stored)."""
    with transaction(api.sessions) as session:
        return NewTokenOut.of_new(workspaces.create_api_token(session, workspace_id, name=body.name))


@router.get("/{token_id}", responses=responses(401, 404, 422))
def get_token(workspace_id: WorkspaceId, token_id: TokenId, api: Api) -> TokenOut:
    """One token: its name, prefix, when it was made, last used and revoked."""
    with api.sessions() as session:
        return TokenOut.of(workspaces.get_api_token(session, workspace_id, token_id))


@router.post("/{token_id}/revoke", responses=responses(401, 404, 422))
def revoke_token(workspace_id: WorkspaceId, token_id: TokenId, api: Api) -> TokenOut:
    """Revoke a token: every request with it is refused (401) from now on, this one's own token included.
    Revoking a revoked token changes nothing."""
    with transaction(api.sessions) as session:
        return TokenOut.of(workspaces.revoke_api_token(session, workspace_id, token_id))
