"""What the bodies of every noun share: the strict request base, the field rules several nouns use, and what
a delete is shown as."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from pipelines_dagster.core.catalog.schedules import MAX_EVERY_MINUTES
from pipelines_dagster.core.validation import field_rule, in_utc, iso_8601_text, validate_name

# Bounds one request body; a pipeline over more pages crawls its connector's list.
MAX_URLS = 10_000


class RequestBody(BaseModel):
    """A request body: unknown fields are refused, and JSON types are taken as they are, so `"no"` is no
    boolean, `true` no id and `"5"` no number (an integer is a number, though).

    FastAPI validates the parsed JSON as Python objects, where strict mode wants an enum member itself:
    an enum field says `strict=False` (a list of them `Strict(False)` on its items), since JSON has no enums
    and a member arrives as its text.
    """

    model_config = ConfigDict(extra="forbid", strict=True)


# A query time: ISO 8601 text only (pydantic would read a bare number as a Unix time), then in UTC.
IsoText = field_rule(iso_8601_text, before=True)
InUtc = field_rule(in_utc)

Name = Annotated[str, Field(min_length=1, max_length=200), field_rule(validate_name)]
EveryMinutes = Annotated[int, Field(ge=1, le=MAX_EVERY_MINUTES, description="Run every N minutes.")]


class DeletedOut(BaseModel):
    """What the CLI prints for a delete, which the API answers with 204 and no body."""

    id: int
    deleted: bool
