"""The app database's schema state, as `pipelines-dagster db upgrade` prints it (the API has no route)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class DatabaseOut(BaseModel):
    database: str = Field(description="The app database's URL, without its password.")
    status: Literal["current"] = Field(description="Its schema is the code's.")
