"""How the API's operations are named in its OpenAPI document."""

from __future__ import annotations

from fastapi.routing import APIRoute


def operation_id(route: APIRoute) -> str:
    """A route's operationId: its function's name (`create_pipeline`), which client generators turn into
    method names; function names are unique across the app, and a test holds them to it."""
    return route.name
