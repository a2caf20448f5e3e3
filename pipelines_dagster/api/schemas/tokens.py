"""A workspace's API tokens: what names a new one, and how a token is shown (its secret only when it is made)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from pipelines_dagster.api.schemas.common import RequestBody
from pipelines_dagster.app_db.models import ApiToken
from pipelines_dagster.core.catalog.workspaces import TOKEN_NAME_MAX_LENGTH, NewApiToken
from pipelines_dagster.core.validation import field_rule, validate_name

TokenName = Annotated[
    str,
    Field(min_length=1, max_length=TOKEN_NAME_MAX_LENGTH),
    field_rule(lambda name: validate_name(name, max_length=TOKEN_NAME_MAX_LENGTH)),
]


class TokenIn(RequestBody):
    name: TokenName = Field(
        description="What the token is for (`ci`, `chat-agent`): unique among the workspace's live tokens.",
        examples=["ci"],
    )


class TokenOut(BaseModel):
    id: int
    name: str
    prefix: str = Field(description="The token's first characters, to tell which one a client holds.")
    created_at: datetime
    last_used_at: datetime | None = Field(
        description="When the API or the MCP server last took the token (to within 5 minutes); null: never."
    )
    revoked_at: datetime | None = Field(description="Set: the token is refused (401) on every request since.")

    @classmethod
    def of(cls, row: ApiToken) -> TokenOut:
        return cls(
            id=row.id,
            name=row.name,
            prefix=row.prefix,
            created_at=row.created_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )


class NewTokenOut(TokenOut):
    token: str = Field(description="Shown this once: only its hash is stored. Send it as `Authorization: Bearer`.")

    @classmethod
    def of_new(cls, made: NewApiToken) -> NewTokenOut:
        return cls(**TokenOut.of(made.row).model_dump(), token=made.token)


class TokenList(BaseModel):
    tokens: list[TokenOut]
