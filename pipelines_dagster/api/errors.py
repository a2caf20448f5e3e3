"""Every error as JSON `{"detail": ...}`: a sentence, or for 422 a list of `{"field", "message"}`.

A user error raised anywhere below a route maps to one status here by its base class in `core.errors`
(invalid input, not found, conflict), so routes stay free of try/except and a new error type needs no
entry; the OpenAPI declarations sit next to the mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from fastapi import FastAPI, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from pipelines_dagster.api.schemas.errors import ErrorResponse, FieldError, ValidationErrorResponse
from pipelines_dagster.core.errors import ConflictError, InvalidInputError, NotFoundError
from pipelines_dagster.launch import DagsterUnavailableError, LaunchFailedError

log = logging.getLogger(__name__)

_DESCRIPTIONS = {
    401: "Missing, unknown or revoked API token.",
    404: "Not found, or not in the token's workspace.",
    409: "The pipeline, connector or endpoint cannot do this now, or a concurrent request changed it; the detail "
    "says why.",
    422: "Invalid input: one entry per field that needs fixing.",
    502: "The Dagster webserver answered but did not launch the run.",
    503: "A service the request needs (Dagster webserver, app database) is not reachable.",
}

_REPLACE_NEEDS_EVERY_FIELD = (
    "required: PUT replaces the whole object, so give every field (null where it may be empty); "
    "PATCH changes only the fields it is given"
)

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def responses(*codes: int, by_reference: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI declarations of the error statuses a route can answer with.

    `by_reference` is for a route whose own media type is not JSON: FastAPI would file a
    `model` under that media type, so the schema is named by reference instead.
    """
    declared: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        model = ValidationErrorResponse if code == 422 else ErrorResponse
        entry: dict[str, Any] = {"description": _DESCRIPTIONS[code]}
        if by_reference:
            entry["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}
        else:
            entry["model"] = model
        if code == 401:
            entry["headers"] = {"WWW-Authenticate": {"description": "Always `Bearer`.", "schema": {"type": "string"}}}
        declared[code] = entry
    return declared


def _field_name(location: Sequence[int | str]) -> str:
    parts = list(location)
    if parts and parts[0] in {"body", "path", "query", "header", "cookie"}:
        parts = parts[1:]
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def _invalid(errors: list[FieldError]) -> JSONResponse:
    return JSONResponse(
        ValidationErrorResponse(detail=errors).model_dump(), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT
    )


def _detail(code: int, message: str) -> JSONResponse:
    return JSONResponse(ErrorResponse(detail=message).model_dump(), status_code=code)


async def _request_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = []
    for error in exc.errors():
        if error["type"] == "json_invalid":
            reason = error.get("ctx", {}).get("error", error["msg"])
            errors.append(FieldError(field="body", message=f"the body is not valid JSON: {reason}"))
        elif error["type"] == "missing" and request.method == "PUT" and error["loc"][:1] == ("body",):
            errors.append(FieldError(field=_field_name(error["loc"]), message=_REPLACE_NEEDS_EVERY_FIELD))
        else:
            errors.append(FieldError(field=_field_name(error["loc"]), message=error["msg"]))
    return _invalid(errors)


async def _input_invalid(request: Request, exc: InvalidInputError) -> JSONResponse:
    return _invalid([FieldError(field=exc.field, message=exc.message)])


async def _not_found(request: Request, exc: NotFoundError) -> JSONResponse:
    return _detail(status.HTTP_404_NOT_FOUND, str(exc))


async def _conflict(request: Request, exc: ConflictError) -> JSONResponse:
    return _detail(status.HTTP_409_CONFLICT, str(exc))


async def _dagster_unavailable(request: Request, exc: DagsterUnavailableError) -> JSONResponse:
    return _detail(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc))


async def _launch_failed(request: Request, exc: LaunchFailedError) -> JSONResponse:
    return _detail(status.HTTP_502_BAD_GATEWAY, str(exc))


async def _database_unreachable(request: Request, exc: sa.exc.OperationalError) -> JSONResponse:
    log.error("app database error: %s", exc.orig)
    return _detail(status.HTTP_503_SERVICE_UNAVAILABLE, "the app database is not reachable or busy; try again shortly")


async def _concurrent_write(request: Request, exc: sa.exc.IntegrityError) -> JSONResponse:
    # The checks that refuse duplicates run again when a concurrent commit wins a unique key
    # (catalog.refused_as_sequential); what still lands here lost some other race, and is worth retrying.
    log.warning("app database refused a write: %s", exc.orig)
    return _detail(
        status.HTTP_409_CONFLICT, "a concurrent request changed what this one writes; read it again and retry"
    )


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if exc.status_code == status.HTTP_400_BAD_REQUEST and isinstance(exc.__cause__, UnicodeDecodeError):
        # FastAPI answers 400 for a body it cannot decode; it is invalid input like malformed JSON.
        return _invalid([FieldError(field="body", message="the body is not valid JSON: it is not UTF-8 text")])
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        # Starlette names only the first route on the path; a path with GET, PUT and DELETE
        # routes must list all three.
        allowed = [
            method
            for method in _METHODS
            if any(
                route.matches({**request.scope, "method": method})[0] is Match.FULL
                for route in request.app.router.routes
            )
        ]
        exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
    return await http_exception_handler(request, exc)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return _detail(status.HTTP_500_INTERNAL_SERVER_ERROR, "internal error; the server log has the details")


def _document_validation_errors(app: FastAPI) -> None:
    """Make every 422 in the OpenAPI document the shape the handler sends, on routes that declared none too.

    FastAPI documents its own error list for each route with parameters unless the route
    declares a 422; one place here keeps the document true for every router.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        _, definitions = models_json_schema(
            [(ValidationErrorResponse, "serialization")], ref_template="#/components/schemas/{model}"
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(definitions["$defs"])
        ours = {"$ref": f"#/components/schemas/{ValidationErrorResponse.__name__}"}
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                invalid = operation.get("responses", {}).get("422")
                if invalid is not None:
                    invalid["content"] = {"application/json": {"schema": ours}}
        for fastapi_default in ("HTTPValidationError", "ValidationError"):
            schemas.pop(fastapi_default, None)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def install_error_handlers(app: FastAPI) -> None:
    _handle(app, RequestValidationError, _request_invalid)
    _handle(app, InvalidInputError, _input_invalid)
    _handle(app, NotFoundError, _not_found)
    _handle(app, ConflictError, _conflict)
    _handle(app, DagsterUnavailableError, _dagster_unavailable)
    _handle(app, LaunchFailedError, _launch_failed)
    _handle(app, sa.exc.OperationalError, _database_unreachable)
    _handle(app, sa.exc.IntegrityError, _concurrent_write)
    _handle(app, StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    _document_validation_errors(app)


E = TypeVar("E", bound=Exception)


def _handle(app: FastAPI, exc_class: type[E], handler: Callable[[Request, E], Awaitable[Response]]) -> None:
    """Register a handler, checked against the class it handles (Starlette only runs it for that class)."""
    app.add_exception_handler(exc_class, handler)  # type: ignore[arg-type]  # Starlette types every handler as taking any Exception
