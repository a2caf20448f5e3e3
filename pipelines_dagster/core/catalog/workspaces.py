"""Workspaces, their API tokens, and the lookups scoped to one: a row of another workspace is not found."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import ApiToken, Workspace
from pipelines_dagster.core.crawl.etiquette import validate_owned_hosts
from pipelines_dagster.core.errors import ConflictError, NotFoundError, UserError
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
        raise InvalidTokenError(
            "the API token is not valid; use a live token of the workspace "
            "(`pipelines-dagster token create --workspace N --name NAME` makes one)"
        )
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


# What `workspace create` names the token it prints, and revision 0012 the token each workspace had before.
FIRST_TOKEN_NAME = "default"
TOKEN_NAME_MAX_LENGTH = 100


@dataclass(frozen=True)
class NewApiToken:
    row: ApiToken
    token: str
    """Shown once; only its hash is stored."""


@dataclass(frozen=True)
class NewWorkspace:
    workspace: Workspace
    token: NewApiToken
    """Its first token, named FIRST_TOKEN_NAME."""

    @property
    def api_token(self) -> str:
        return self.token.token


def create_workspace(session: Session, *, name: str, owner_user_id: str) -> NewWorkspace:
    workspace = Workspace(name=validate_name(name), owner_user_id=validate_name(owner_user_id, field="owner"))
    session.add(workspace)
    session.flush()
    return NewWorkspace(workspace, create_api_token(session, workspace.id, name=FIRST_TOKEN_NAME))


def create_api_token(session: Session, workspace_id: int, *, name: str) -> NewApiToken:
    """A new token of the workspace under a name none of its live tokens has."""
    get_workspace(session, workspace_id)
    name = validate_name(name, max_length=TOKEN_NAME_MAX_LENGTH)
    if session.scalar(_live_tokens(workspace_id).where(ApiToken.name == name)) is not None:
        raise ConflictError(
            f"workspace {workspace_id} already has a token named {name!r}; pick another name, or revoke that "
            "token first to reuse its name"
        )
    token = new_token(TOKEN_PREFIX)
    row = ApiToken(workspace_id=workspace_id, name=name, token_hash=hash_token(token), prefix=token[:12])
    session.add(row)
    session.flush()
    return NewApiToken(row, token)


def list_api_tokens(session: Session, workspace_id: int, *, include_revoked: bool = False) -> list[ApiToken]:
    """The workspace's tokens, oldest first: the live ones, or every one."""
    get_workspace(session, workspace_id)
    query = sa.select(ApiToken).where(ApiToken.workspace_id == workspace_id)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return list(session.scalars(query.order_by(ApiToken.id)))


def get_api_token(session: Session, workspace_id: int, token_id: int) -> ApiToken:
    row = session.get(ApiToken, token_id)
    if row is None or row.workspace_id != workspace_id:
        raise NotFoundError(f"workspace {workspace_id} has no token {token_id}; `token list` shows its tokens")
    return row


def revoke_api_token(session: Session, workspace_id: int, token_id: int) -> ApiToken:
    """Revoke a token: refused from the next request on. Revoking a revoked token changes nothing."""
    row = get_api_token(session, workspace_id, token_id)
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
        session.flush()
    return row


def _live_tokens(workspace_id: int) -> sa.Select[ApiToken]:
    return sa.select(ApiToken).where(ApiToken.workspace_id == workspace_id, ApiToken.revoked_at.is_(None))


def list_workspaces(session: Session) -> list[Workspace]:
    return list(session.scalars(sa.select(Workspace).order_by(Workspace.id)))


def live_token_counts(session: Session, workspace_ids: list[int]) -> dict[int, int]:
    """How many live tokens each workspace has (absent: none)."""
    counts = session.execute(
        sa.select(ApiToken.workspace_id, sa.func.count())
        .where(ApiToken.workspace_id.in_(workspace_ids), ApiToken.revoked_at.is_(None))
        .group_by(ApiToken.workspace_id)
    )
    return dict(counts.all())


def get_workspace(session: Session, workspace_id: int) -> Workspace:
    workspace = session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFoundError(f"workspace {workspace_id} does not exist")
    return workspace


def set_owned_hosts(session: Session, workspace_id: int, hosts: list[str]) -> Workspace:
    """Declare the hosts the workspace owns, replacing those it had: its connectors may ignore robots.txt there.
    A host given up is obeyed again from the next crawl on, whatever a connector says."""
    workspace = get_workspace(session, workspace_id)
    workspace.owned_hosts = validate_owned_hosts(hosts)
    session.flush()
    return workspace
