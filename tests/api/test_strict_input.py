"""No 500 for a user's mistake: JSON types taken as they are, numbers bounded, timezones from the IANA list,
crons that fire; each refusal names its field and stores nothing."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from pipelines_dagster.api.schemas.common import RequestBody
from tests.api.conftest import Tenant
from tests.support.db import row_counts

LOOSE_PIPELINE_BODIES = [
    ({"enabled": "no"}, "enabled"),
    ({"enabled": 0}, "enabled"),
    ({"save_to_kb": "false"}, "save_to_kb"),
    ({"connector_id": True}, "connector_id"),
    ({"connector_id": "1"}, "connector_id"),
    ({"connector_id": 1.0}, "connector_id"),
    ({"folder_id": True}, "folder_id"),
    ({"retry_policy": {"delay_seconds": 1e-300}}, "retry_policy.delay_seconds"),
    ({"retry_policy": {"delay_seconds": 0.5}}, "retry_policy.delay_seconds"),
    ({"retry_policy": {"delay_seconds": "2"}}, "retry_policy.delay_seconds"),
    ({"retry_policy": {"delay_seconds": True}}, "retry_policy.delay_seconds"),
    ({"retry_policy": {"max_retries": "3"}}, "retry_policy.max_retries"),
    ({"retry_policy": {"max_retries": 3.0}}, "retry_policy.max_retries"),
    ({"schedule": {"every_minutes": "60"}}, "schedule.every_minutes"),
    ({"schedule": {"every_minutes": True}}, "schedule.every_minutes"),
    ({"schedule": {"every_minutes": 10**12}}, "schedule.every_minutes"),
    ({"schedule": {"cron": "0 0 30 2 *", "timezone": "UTC"}}, "schedule.cron"),
    ({"schedule": {"cron": "0 0 31 4,6,9,11 *", "timezone": "UTC"}}, "schedule.cron"),
    ({"schedule": {"cron": "0 6 * * *", "timezone": "localtime"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 6 * * *", "timezone": "posixrules"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 6 * * *", "timezone": "Factory"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 6 * * *", "timezone": "../../../etc/localtime"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 6 * * *", "timezone": "/usr/share/zoneinfo/UTC"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 6 * * *", "timezone": "Europe/../UTC"}}, "schedule.timezone"),
]


def create(client, tenant: Tenant, **fields: Any) -> httpx.Response:
    return client.post(
        tenant.pipelines, headers=tenant.headers, json={"name": "p", "connector_id": tenant.connector_id, **fields}
    )


def only_field(response: httpx.Response) -> str:
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["message"]
    return error["field"]


@pytest.mark.parametrize(("body", "field"), LOOSE_PIPELINE_BODIES)
def test_a_loose_value_is_refused_naming_its_field_and_nothing_is_stored(client, app_engine, tenant, body, field):
    before = row_counts(app_engine)
    assert only_field(create(client, tenant, **body)) == field
    assert row_counts(app_engine) == before


def test_a_cron_that_never_fires_says_so(client, tenant):
    refused = create(client, tenant, schedule={"cron": "0 0 30 2 *", "timezone": "UTC"})
    assert "never fires" in refused.json()["detail"][0]["message"]
    # February 29th does exist, every four years.
    assert create(client, tenant, schedule={"cron": "0 0 29 2 *", "timezone": "UTC"}).status_code == 201


def test_a_loose_value_in_an_update_changes_nothing(client, app_engine, tenant):
    made = create(client, tenant, enabled=True, retry_policy={"delay_seconds": 5})
    assert made.status_code == 201, made.text
    # An integer is a number: JSON has no separate float.
    assert made.json()["retry_policy"]["delay_seconds"] == 5.0
    path = f"{tenant.pipelines}/{made.json()['id']}"
    before = row_counts(app_engine), client.get(path, headers=tenant.headers).json()
    for body, field in [
        ({"enabled": "no"}, "enabled"),
        ({"connector_id": True}, "connector_id"),
        ({"retry_policy": {"delay_seconds": 1e-300}}, "retry_policy.delay_seconds"),
        ({"schedule": {"cron": "0 6 * * *", "timezone": "localtime"}}, "schedule.timezone"),
    ]:
        assert only_field(client.patch(path, headers=tenant.headers, json=body)) == field
    assert (row_counts(app_engine), client.get(path, headers=tenant.headers).json()) == before


@pytest.mark.parametrize("minutes", ["5", True, 0, 10**12])
def test_a_connectors_indexing_interval_is_a_bounded_integer(client, app_engine, tenant, minutes):
    before = row_counts(app_engine)
    refused = client.post(
        f"/workspaces/{tenant.workspace_id}/connectors",
        headers=tenant.headers,
        json={"type": "webcrawler", "urls": ["https://docs.example.com/"], "index_every_minutes": minutes},
    )
    assert only_field(refused) == "index_every_minutes"
    assert row_counts(app_engine) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"event_type": "refresh.requested", "payload": {"connector_id": True}}, "payload.connector_id"),
        ({"event_type": "refresh.requested", "payload": {"pipeline_id": 2**63}}, "payload.pipeline_id"),
        ({"event_type": "refresh.requested", "payload": {"pipeline_id": "7"}}, "payload.pipeline_id"),
        ({"event_type": 1}, "event_type"),
    ],
)
def test_an_event_naming_its_pipeline_loosely_is_refused(client, app_engine, tenant, body, field):
    before = row_counts(app_engine)
    refused = client.post(f"/workspaces/{tenant.workspace_id}/events", headers=tenant.headers, json=body)
    assert only_field(refused) == field
    assert row_counts(app_engine) == before


def test_enum_fields_still_take_their_text(client, tenant):
    pipeline_id = create(client, tenant).json()["id"]
    made = client.post(
        f"{tenant.pipelines}/{pipeline_id}/triggers",
        headers=tenant.headers,
        json={"kind": "event", "event_type": "refresh.requested"},
    )
    assert made.status_code == 201, made.text
    hook = client.post(
        f"{tenant.pipelines}/{pipeline_id}/triggers", headers=tenant.headers, json={"kind": "webhook", "signing": 1}
    )
    assert only_field(hook) == "signing"


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        yield annotation
        for field in annotation.model_fields.values():
            yield from _models(field.annotation)
    for argument in get_args(annotation):
        yield from _models(argument)


def _api_routes(routes: list[Any]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        # An included router (FastAPI 0.165 keeps each one whole, not its routes copied).
        yield from _api_routes(getattr(getattr(route, "original_router", None), "routes", []))


def test_every_request_body_is_strict(client):
    """Checked over the app's routes, so a new body cannot be loose by being forgotten."""
    bodies = {
        model
        for route in _api_routes(client.app.routes)
        for param in route.dependant.body_params
        for model in _models(param.field_info.annotation)
    }
    assert len(bodies) >= 10
    loose = sorted(model.__name__ for model in bodies if not issubclass(model, RequestBody))
    assert loose == []
    assert all(model.model_config.get("strict") and model.model_config.get("extra") == "forbid" for model in bodies)
