"""Bearer tokens: 401 without a valid one on every route, 404 for any workspace but the token's own."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import ApiToken
from pipelines_dagster.core.security.tokens import hash_token
from tests.api.conftest import NOTIFICATION_OPERATIONS, PIPELINE_OPERATIONS, Tenant, issue_token


def every_route(client, workspace_id: int) -> list[tuple[str, str]]:
    """(method, concrete path) of every workspace operation the OpenAPI document declares."""
    declared = {
        f"{method.upper()} {path}"
        for path, operations in client.get("/openapi.json").json()["paths"].items()
        if path.startswith("/workspaces/{workspace_id}/")
        for method in operations
    }
    assert declared >= PIPELINE_OPERATIONS | NOTIFICATION_OPERATIONS
    values = {
        "workspace_id": workspace_id,
        "pipeline_id": 1,
        "connector_id": 1,
        "run_id": uuid.uuid4(),
        "trigger_id": 1,
        "change_id": 1,
        "endpoint_id": 1,
        "delivery_id": 1,
        "document_id": 1,
        "token_id": 1,
    }
    return [(label.split(" ")[0], label.split(" ")[1].format(**values)) for label in sorted(declared)]


def assert_unauthorized(response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert isinstance(response.json()["detail"], str)


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Basic dXNlcjpwYXNz", "Bearer pdk_not-a-real-token", "bearer  "],
    ids=["missing", "empty", "no-token", "basic", "unknown", "blank"],
)
def test_every_route_refuses_a_missing_or_bad_token(client, tenant: Tenant, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in every_route(client, tenant.workspace_id):
        assert_unauthorized(client.request(method, path, headers=headers, json={}))


def test_a_revoked_token_is_refused_and_another_token_of_the_workspace_works(client, sessions, tenant):
    second = issue_token(sessions, tenant.workspace_id)
    with transaction(sessions) as session:
        session.execute(
            sa.update(ApiToken)
            .where(ApiToken.token_hash == hash_token(tenant.token))
            .values(revoked_at=datetime.now(UTC))
        )
    response = client.get(tenant.pipelines, headers=tenant.headers)
    assert_unauthorized(response)
    assert "revoked" in response.json()["detail"]
    assert client.get(tenant.pipelines, headers={"Authorization": f"Bearer {second}"}).status_code == 200


def test_another_workspace_answers_404_like_one_that_does_not_exist(client, tenant: Tenant, other: Tenant):
    missing = other.workspace_id + 1000
    for workspace_id in (other.workspace_id, missing):
        for method, path in every_route(client, workspace_id):
            response = client.request(method, path, headers=tenant.headers, json={})
            assert response.status_code == 404, (method, path, response.text)
            assert response.json() == {"detail": f"workspace {workspace_id} not found"}


def test_last_used_at_is_written_on_first_use_and_then_at_most_every_few_minutes(client, sessions, tenant):
    def last_used() -> datetime | None:
        with sessions() as session:
            return session.scalar(
                sa.select(ApiToken.last_used_at).where(ApiToken.token_hash == hash_token(tenant.token))
            )

    assert last_used() is None
    client.get(tenant.pipelines, headers=tenant.headers)
    first = last_used()
    assert first is not None
    client.get(tenant.pipelines, headers=tenant.headers)
    assert last_used() == first
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    with transaction(sessions) as session:
        session.execute(
            sa.update(ApiToken).where(ApiToken.token_hash == hash_token(tenant.token)).values(last_used_at=long_ago)
        )
    client.get(tenant.pipelines, headers=tenant.headers)
    assert last_used() > first
