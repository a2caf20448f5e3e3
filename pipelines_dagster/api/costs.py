"""What a workspace's crawls were charged, from the ledger: the total over a time range and by pipeline."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import AwareDatetime, BaseModel, Field

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas import InUtc, IsoText
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.ledger.costs import CostTotals, cost_totals
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}", tags=["costs"])

Moment = Annotated[AwareDatetime | None, IsoText, InUtc]


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


@router.get("/costs", responses=responses(401, 404, 422))
def get_costs(
    workspace_id: WorkspaceId,
    api: Api,
    since: Annotated[Moment, Query(description="From this time (ISO 8601 with its UTC offset), included.")] = None,
    until: Annotated[Moment, Query(description="Up to this time, excluded; default now.")] = None,
    pipeline_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Only this pipeline's charges.")] = None,
) -> CostTotalsOut:
    """The crawl charges of the workspace (or one pipeline) over a time range, from the credit ledger.

    A re-executed or retried run shares its root run's charge, so each charge counts once here, as
    it does summed over the runs' `new_charge_micros`.
    """
    with api.sessions() as session:
        if pipeline_id is not None:
            get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        totals = cost_totals(session, workspace_id=workspace_id, since=since, until=until, pipeline_id=pipeline_id)
    return CostTotalsOut.of(totals)
