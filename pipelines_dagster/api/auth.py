"""Bearer API tokens: each names one workspace, and every route answers only for that workspace."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pipelines_dagster.api.deps import Api
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog.workspaces import InvalidTokenError, workspace_of_token
from pipelines_dagster.core.validation import MAX_ID

bearer = HTTPBearer(
    auto_error=False,
    description="A workspace API token, as printed once by `pipelines-dagster workspace create` or "
    "`pipelines-dagster token create`.",
)


def unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": "Bearer"})


def token_workspace(
    api: Api,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> int:
    """The workspace of the request's bearer token; 401 for a missing, unknown or revoked one."""
    if credentials is None:
        raise unauthorized("send the workspace's API token as `Authorization: Bearer <token>`")
    try:
        with transaction(api.sessions) as session:
            return workspace_of_token(session, credentials.credentials)
    except InvalidTokenError as exc:
        raise unauthorized(str(exc)) from None


def workspace_scope(
    workspace_id: Annotated[int, Path(ge=1, le=MAX_ID, description="The token's workspace.")],
    token_workspace_id: Annotated[int, Depends(token_workspace)],
) -> int:
    """The path's workspace when it is the token's; any other answers 404, so ids cannot be probed."""
    if workspace_id != token_workspace_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"workspace {workspace_id} not found")
    return workspace_id


WorkspaceId = Annotated[int, Depends(workspace_scope)]
