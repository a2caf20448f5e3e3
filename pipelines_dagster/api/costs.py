"""What a workspace's crawls were charged, from the ledger: the total over a time range and by pipeline."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import AwareDatetime

from pipelines_dagster.api.auth import WorkspaceId
from pipelines_dagster.api.deps import Api
from pipelines_dagster.api.errors import responses
from pipelines_dagster.api.schemas.common import InUtc, IsoText
from pipelines_dagster.api.schemas.costs import CostTotalsOut
from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.ledger.costs import cost_totals
from pipelines_dagster.core.validation import MAX_ID

router = APIRouter(prefix="/workspaces/{workspace_id}", tags=["costs"])

Moment = Annotated[AwareDatetime | None, IsoText, InUtc]


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
