"""What run-now answers. A run's history pages and details are the read side's own models (`history`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RunLaunched(BaseModel):
    run_id: str = Field(description="The Dagster run id; follow it under .../runs/{run_id}.")
