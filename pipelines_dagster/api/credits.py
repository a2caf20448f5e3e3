"""A workspace's crawl credit: its balance, what crawls under way hold of it, and what is left for new ones."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.core.ledger.billing import CreditSummary

router = APIRouter(prefix="/workspaces/{workspace_id}", tags=["credits"])


class CreditsOut(BaseModel):
    billing_enabled: bool = Field(description="false on a deployment that does not charge crawls.")
    balance_micros: int = Field(description="Granted less charged, in micro-credits.")
    held_micros: int = Field(description="Reserved by crawls under way: each holds what it may spend at most.")
    available_micros: int = Field(description="What a new crawl can reserve: the balance less what is held.")

    @classmethod
    def of(cls, summary: CreditSummary, *, billing_enabled: bool) -> CreditsOut:
        return cls(
            billing_enabled=billing_enabled,
            balance_micros=summary.balance_micros,
            held_micros=summary.held_micros,
            available_micros=summary.available_micros,
        )


@router.get("/credits", responses=responses(401, 404))
def get_credits(workspace_id: WorkspaceId, api: Api) -> CreditsOut:
    """The workspace's crawl credit. A crawl reserves credit for every page it may fetch before its first
    request and its charge gives back what it did not spend, so `available_micros` is what the next run
    is checked against."""
    return CreditsOut.of(api.billing.summary(workspace_id), billing_enabled=api.billing.enabled)
