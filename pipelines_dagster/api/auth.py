"""Bearer API tokens: each names one workspace, and every route answers only for that workspace."""

from __future__ import annotations

import hmac
from datetime import UTC, datetime, timedelta
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, HTTPException, Path, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.schemas import MAX_ID
from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import ApiToken
from pipelines_dagster.core.catalog import hash_token

# last_used_at is for spotting stale tokens, so minutes are precise enough, and
# most requests then need no write at all.
LAST_USED_RESOLUTION = timedelta(minutes=5)

bearer = HTTPBearer(
    auto_error=False,
    description="A workspace API token, as printed once by `pipelines-dagster workspace create`.",
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
    digest = hash_token(credentials.credentials)
    with api.sessions() as session:
        token = session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == digest))
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        raise unauthorized("the API token is not valid; use the token printed when the workspace was created")
    if token.revoked_at is not None:
        raise unauthorized("the API token was revoked; use a current token of the workspace")
    now = datetime.now(UTC)
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        stale = now - LAST_USED_RESOLUTION
        with transaction(api.sessions) as session:
            # The condition repeats the check, so concurrent requests write the row once.
            session.execute(
                sa.update(ApiToken)
                .where(
                    ApiToken.id == token.id,
                    sa.or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= stale),
                )
                .values(last_used_at=now)
            )
    return token.workspace_id


def workspace_scope(
    workspace_id: Annotated[int, Path(ge=1, le=MAX_ID, description="The token's workspace.")],
    token_workspace_id: Annotated[int, Depends(token_workspace)],
) -> int:
    """The path's workspace when it is the token's; any other answers 404, so ids cannot be probed."""
    if workspace_id != token_workspace_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"workspace {workspace_id} not found")
    return workspace_id


WorkspaceId = Annotated[int, Depends(workspace_scope)]
