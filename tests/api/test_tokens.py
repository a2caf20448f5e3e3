"""A workspace's tokens over HTTP, managed with one of its own: several named tokens, each secret shown once,
last use recorded, revoke refused at once; another workspace's tokens are never seen or touched."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from pipelines_dagster.app_db.models import ApiToken
from tests.api.conftest import Tenant


def tokens_url(tenant: Tenant) -> str:
    return f"/workspaces/{tenant.workspace_id}/tokens"


def test_a_workspace_token_makes_lists_shows_and_revokes_named_tokens_of_its_own_workspace(client, sessions, tenant):
    made = client.post(tokens_url(tenant), json={"name": "ci"}, headers=tenant.headers)
    assert made.status_code == 201, made.text
    ci = made.json()
    assert ci["name"] == "ci" and ci["token"].startswith(ci["prefix"]) and ci["revoked_at"] is None
    # Only the hash is stored: the secret is in no column.
    with sessions() as session:
        stored = session.scalars(sa.select(ApiToken).where(ApiToken.workspace_id == tenant.workspace_id)).all()
    assert all(ci["token"] not in (row.token_hash, row.prefix) for row in stored)

    listed = client.get(tokens_url(tenant), headers=tenant.headers).json()["tokens"]
    assert [entry["name"] for entry in listed] == ["default", "ci"]
    assert all("token" not in entry for entry in listed)

    ci_headers = {"Authorization": f"Bearer {ci['token']}"}
    assert client.get(tenant.pipelines, headers=ci_headers).status_code == 200
    shown = client.get(f"{tokens_url(tenant)}/{ci['id']}", headers=tenant.headers).json()
    assert datetime.fromisoformat(shown["last_used_at"]) >= datetime.fromisoformat(ci["created_at"])
    assert "token" not in shown

    revoked = client.post(f"{tokens_url(tenant)}/{ci['id']}/revoke", headers=tenant.headers)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    refused = client.get(tenant.pipelines, headers=ci_headers)
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
    assert client.get(tenant.pipelines, headers=tenant.headers).status_code == 200
    assert [entry["name"] for entry in client.get(tokens_url(tenant), headers=tenant.headers).json()["tokens"]] == [
        "default"
    ]
    every = client.get(tokens_url(tenant), params={"include_revoked": "true"}, headers=tenant.headers).json()
    assert [entry["name"] for entry in every["tokens"]] == ["default", "ci"]
    # A revoked token's name is free for its successor.
    assert client.post(tokens_url(tenant), json={"name": "ci"}, headers=tenant.headers).status_code == 201


def test_a_token_can_revoke_itself_and_is_refused_from_the_next_request(client, tenant):
    [own] = client.get(tokens_url(tenant), headers=tenant.headers).json()["tokens"]
    assert client.post(f"{tokens_url(tenant)}/{own['id']}/revoke", headers=tenant.headers).status_code == 200
    assert client.get(tokens_url(tenant), headers=tenant.headers).status_code == 401


def test_another_workspaces_tokens_are_not_found_and_stay_live(client, tenant, other):
    [theirs] = client.get(tokens_url(other), headers=other.headers).json()["tokens"]
    for method, path in [
        ("GET", tokens_url(other)),
        ("POST", tokens_url(other)),
        # Their token's id under our own workspace is not ours either.
        ("GET", f"{tokens_url(tenant)}/{theirs['id']}"),
        ("POST", f"{tokens_url(tenant)}/{theirs['id']}/revoke"),
        ("POST", f"{tokens_url(other)}/{theirs['id']}/revoke"),
    ]:
        answer = client.request(method, path, json={"name": "sneaky"}, headers=tenant.headers)
        assert answer.status_code == 404, (method, path, answer.text)
    assert client.get(other.pipelines, headers=other.headers).status_code == 200
    names = [entry["name"] for entry in client.get(tokens_url(other), headers=other.headers).json()["tokens"]]
    assert names == ["default"]


def test_a_duplicate_or_bad_name_is_refused_saying_what_to_fix(client, tenant):
    first = client.post(tokens_url(tenant), json={"name": "agent"}, headers=tenant.headers)
    assert first.status_code == 201
    again = client.post(tokens_url(tenant), json={"name": "agent"}, headers=tenant.headers)
    assert again.status_code == 409 and "already has a token named 'agent'" in again.json()["detail"]
    for body, field in [({"name": ""}, "name"), ({"name": "x" * 101}, "name"), ({}, "name"), ({"name": 5}, "name")]:
        answer = client.post(tokens_url(tenant), json=body, headers=tenant.headers)
        assert answer.status_code == 422, answer.text
        assert [error["field"] for error in answer.json()["detail"]] == [field]
