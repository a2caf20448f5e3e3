"""What a workspace's crawls were charged over a time range, in total and by pipeline."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime

from pydantic import BaseModel, Field

from pipelines_dagster.core.ledger.costs import CostTotals


class PipelineCostOut(BaseModel):
    pipeline_id: int | None = Field(description="null for charges the ledger names no pipeline for.")
    pipeline_name: str | None = Field(description="null when the pipeline has been deleted since.")
    micros: int
    charges: int


class CostTotalsOut(BaseModel):
    since: datetime | None
    until: datetime | None
    micros: int = Field(description="Every crawl charge in the range, in micro-credits: the ledger's sum.")
    charges: int
    pipelines: list[PipelineCostOut] = Field(description="The same charges by pipeline, dearest first.")

    @classmethod
    def of(cls, totals: CostTotals) -> CostTotalsOut:
        return cls(
            since=totals.since,
            until=totals.until,
            micros=totals.micros,
            charges=totals.charges,
            pipelines=[PipelineCostOut(**asdict(cost)) for cost in totals.pipelines],
        )
