"""Workspaces as the CLI prints them (the API has no route that lists or makes one): a new one with its first
API token, shown once, and the workspaces of the deployment."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from pipelines_dagster.api.schemas.tokens import NewTokenOut
from pipelines_dagster.app_db.models import Workspace
from pipelines_dagster.core.catalog.workspaces import NewWorkspace


class NewWorkspaceOut(BaseModel):
    id: int
    name: str
    owner: str = Field(description="User id of the owner, who is billed for crawls.")
    api_token: str = Field(description="Shown once; the API takes it as `Authorization: Bearer <token>`.")
    token: NewTokenOut = Field(description="The workspace's first token, named `default`, with its secret.")

    @classmethod
    def of(cls, created: NewWorkspace) -> NewWorkspaceOut:
        workspace = created.workspace
        return cls(
            id=workspace.id,
            name=workspace.name,
            owner=workspace.owner_user_id,
            api_token=created.api_token,
            token=NewTokenOut.of_new(created.token),
        )


class WorkspaceOut(BaseModel):
    id: int
    name: str
    owner: str = Field(description="User id of the owner, who is billed for crawls.")
    created_at: datetime
    live_tokens: int = Field(description="API tokens not revoked (`token list` shows them).")
    owned_hosts: list[str] = Field(
        description="Hosts an operator declared it owns: its connectors may ignore robots.txt there."
    )

    @classmethod
    def of(cls, workspace: Workspace, *, live_tokens: int) -> WorkspaceOut:
        return cls(
            id=workspace.id,
            name=workspace.name,
            owner=workspace.owner_user_id,
            created_at=workspace.created_at,
            live_tokens=live_tokens,
            owned_hosts=list(workspace.owned_hosts),
        )


class WorkspaceList(BaseModel):
    workspaces: list[WorkspaceOut]
