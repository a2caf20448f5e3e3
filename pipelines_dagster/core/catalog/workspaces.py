"""Workspaces, their API tokens, and the lookups scoped to one: a row of another workspace is not found."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import ApiToken, Workspace
from pipelines_dagster.core.errors import NotFoundError, UserError
from pipelines_dagster.core.security.tokens import TOKEN_PREFIX, hash_token, new_token
from pipelines_dagster.core.validation import validate_name

# last_used_at is for spotting stale tokens, so minutes are precise enough, and
# most uses of a token then need no write at all.
LAST_USED_RESOLUTION = timedelta(minutes=5)


class InvalidTokenError(UserError, LookupError):
    """An API token that is unknown or revoked; the message says which, and what to use instead."""


def workspace_of_token(session: Session, token: str) -> int:
    """The workspace an API token names, noting that it was used; an unknown or revoked token is refused."""
    digest = hash_token(token)
    row = session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == digest))
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        raise InvalidTokenError("the API token is not valid; use the token printed when the workspace was created")
    if row.revoked_at is not None:
        raise InvalidTokenError("the API token was revoked; use a current token of the workspace")
    now = datetime.now(UTC)
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        stale = now - LAST_USED_RESOLUTION
        # The condition repeats the check, so concurrent uses write the row once.
        session.execute(
            sa.update(ApiToken)
            .where(ApiToken.id == row.id, sa.or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= stale))
            .values(last_used_at=now)
        )
    return row.workspace_id


@dataclass(frozen=True)
class NewWorkspace:
    workspace: Workspace
    api_token: str
    """Shown once; only its hash is stored."""


def create_workspace(session: Session, *, name: str, owner_user_id: str) -> NewWorkspace:
    workspace = Workspace(name=validate_name(name), owner_user_id=validate_name(owner_user_id, field="owner"))
    session.add(workspace)
    session.flush()
    return NewWorkspace(workspace, issue_api_token(session, workspace.id))


def issue_api_token(session: Session, workspace_id: int) -> str:
    token = new_token(TOKEN_PREFIX)
    session.add(ApiToken(workspace_id=workspace_id, token_hash=hash_token(token), prefix=token[:12]))
    session.flush()
    return token


def get_workspace(session: Session, workspace_id: int) -> Workspace:
    workspace = session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFoundError(f"workspace {workspace_id} does not exist")
    return workspace
