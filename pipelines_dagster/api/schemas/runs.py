"""What run-now answers. A run's history pages and details are the read side's own models (`history`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


def run_path(*, workspace_id: int, pipeline_id: int, run_id: str) -> str:
    """Where a run is read in this API (`GET` answers its history entry, live counts included)."""
    return f"/workspaces/{workspace_id}/pipelines/{pipeline_id}/runs/{run_id}"


class RunLaunched(BaseModel):
    run_id: str = Field(description="The Dagster run id.")
    url: str = Field(
        description="The run in this API, as the answer's `Location` header gives it: GET it to follow the run.",
        examples=["/workspaces/1/pipelines/2/runs/8f2d3c4e-0c4b-4bd8-9a52-6a4a3f1c9d20"],
    )

    @classmethod
    def of(cls, *, workspace_id: int, pipeline_id: int, run_id: str) -> RunLaunched:
        return cls(run_id=run_id, url=run_path(workspace_id=workspace_id, pipeline_id=pipeline_id, run_id=run_id))
