"""A workspace's crawl credit: its balance, what crawls under way hold of it, and what is left for new ones."""

from __future__ import annotations

from fastapi import APIRouter

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas.credits import CreditsOut

router = APIRouter(prefix="/workspaces/{workspace_id}", tags=["credits"])


@router.get("/credits", responses=responses(401, 404))
def get_credits(workspace_id: WorkspaceId, api: Api) -> CreditsOut:
    """The workspace's crawl credit. A crawl reserves credit for every page it may fetch before its first
    request and its charge gives back what it did not spend, so `available_micros` is what the next run
    is checked against."""
    return CreditsOut.of(api.billing.summary(workspace_id), billing_enabled=api.billing.enabled)
