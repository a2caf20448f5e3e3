"""The bodies every error is answered with: a sentence, or for invalid input one entry per field."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ErrorResponse(BaseModel):
    detail: str


class FieldError(BaseModel):
    field: str = Field(description="Dotted path of the field, e.g. schedule.timezone or urls[2].")
    message: str


class ValidationErrorResponse(BaseModel):
    detail: list[FieldError]
