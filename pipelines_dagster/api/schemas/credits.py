"""A workspace's crawl credit: its balance, what crawls under way hold of it, and what a grant added."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pipelines_dagster.core.ledger.billing import CreditSummary


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


class CreditsGrantOut(BaseModel):
    """What the CLI prints for a grant; the API grants no credit."""

    workspace_id: int
    granted_micros: int
    balance_micros: int = Field(description="The balance after the grant.")
