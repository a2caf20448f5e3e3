"""A new workspace as the CLI prints it (the API has no route that makes one): its API token, shown once."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pipelines_dagster.core.catalog.workspaces import NewWorkspace


class NewWorkspaceOut(BaseModel):
    id: int
    name: str
    owner: str = Field(description="User id of the owner, who is billed for crawls.")
    api_token: str = Field(description="Shown once; the API takes it as `Authorization: Bearer <token>`.")

    @classmethod
    def of(cls, created: NewWorkspace) -> NewWorkspaceOut:
        workspace = created.workspace
        return cls(id=workspace.id, name=workspace.name, owner=workspace.owner_user_id, api_token=created.api_token)
