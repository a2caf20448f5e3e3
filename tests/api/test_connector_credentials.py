"""A connector's credentials over the API: written with `auth`, shown only as kinds and names by every route,
sealed in the database, replaced, kept or cleared by PATCH and PUT, refused by field (never echoing a value), and a
change that would send them to a new host refused."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import session_factory
from pipelines_dagster.app_db.models import Connector
from tests.api.conftest import Tenant
from tests.api.test_connectors import connectors
from tests.api.test_pipelines import fields_of
from tests.support.db import row_counts

PASSWORD = "pw-api-6f0c2b"
TOKEN = "tok-api-0ad91e"
API_KEY = "key-api-b7c3d5"
SESSION = "sess-api-4e8f1a"
SECRETS = (PASSWORD, TOKEN, API_KEY, SESSION)
AUTH = {
    "basic": {"username": "crawler", "password": PASSWORD},
    "headers": {"X-Api-Key": API_KEY},
    "cookies": {"session": SESSION},
}
SHOWN = {"basic": True, "bearer": False, "headers": ["X-Api-Key"], "cookies": ["session"]}
URL = "https://staging.example.com/docs"


def created(client, tenant: Tenant, auth: dict | None = AUTH) -> dict:
    body = {"type": "webcrawler", "urls": [URL], **({"auth": auth} if auth is not None else {})}
    response = client.post(connectors(tenant), headers=tenant.headers, json=body)
    assert response.status_code == 201, response.text
    return response.json()


def assert_no_secret(text: str) -> None:
    assert not [secret for secret in SECRETS if secret in text]


def stored_column(app_engine, connector_id: int) -> str:
    with app_engine.connect() as connection:
        return str(
            connection.execute(sa.text(f"SELECT credentials FROM connectors WHERE id = {connector_id}")).scalar()
        )


def test_credentials_are_written_then_shown_by_every_route_as_kinds_and_names_only(client, app_engine, tenant):
    response = client.post(
        connectors(tenant), headers=tenant.headers, json={"type": "webcrawler", "urls": [URL], "auth": AUTH}
    )
    assert response.status_code == 201 and response.json()["auth"] == SHOWN
    connector_id = response.json()["id"]
    url = f"{connectors(tenant)}/{connector_id}"
    answers = [
        response,
        client.get(url, headers=tenant.headers),
        client.get(connectors(tenant), headers=tenant.headers),
        client.patch(url, headers=tenant.headers, json={"name": "Staging"}),
    ]
    for answer in answers:
        assert answer.status_code == 200 or answer.status_code == 201
        assert_no_secret(answer.text)
    assert answers[1].json()["auth"] == answers[3].json()["auth"] == SHOWN
    assert [c["auth"] for c in answers[2].json()["connectors"]] == [None, SHOWN]  # the tenant's own has none
    column = stored_column(app_engine, connector_id)
    assert column.startswith("{") and "sealed" in column
    assert_no_secret(column)


def test_patch_replaces_them_whole_or_clears_them_and_put_keeps_them_unless_given(client, tenant: Tenant):
    url = f"{connectors(tenant)}/{created(client, tenant)['id']}"
    replaced = client.patch(url, headers=tenant.headers, json={"auth": {"bearer": TOKEN}})
    assert replaced.json()["auth"] == {"basic": False, "bearer": True, "headers": [], "cookies": []}
    put = client.put(url, headers=tenant.headers, json={"urls": [URL], "name": "Staging"})
    assert put.status_code == 200 and put.json()["auth"] == replaced.json()["auth"]
    assert client.put(url, headers=tenant.headers, json={"urls": [URL], "auth": None}).json()["auth"] is None
    client.patch(url, headers=tenant.headers, json={"auth": AUTH})
    cleared = client.patch(url, headers=tenant.headers, json={"auth": None})
    assert cleared.status_code == 200 and cleared.json()["auth"] is None


def test_a_change_sending_kept_credentials_to_a_new_host_is_refused_and_allowed_with_them_given_again(
    client, tenant: Tenant
):
    url = f"{connectors(tenant)}/{created(client, tenant)['id']}"
    moved = {"urls": [URL, "https://collector.example.net/"]}
    refused = client.patch(url, headers=tenant.headers, json=moved)
    assert refused.status_code == 422 and fields_of(refused) == ["urls"]
    assert "collector.example.net" in refused.json()["detail"][0]["message"]
    assert client.get(url, headers=tenant.headers).json()["urls"] == [URL]
    again = client.patch(url, headers=tenant.headers, json={**moved, "auth": AUTH})
    assert again.status_code == 200 and again.json()["urls"] == moved["urls"]


INVALID = [
    ({"headers": {"X-Api-Key": f"{API_KEY}\r\nHost: evil.example"}}, "auth.headers"),
    ({"headers": {"Host": API_KEY}}, "auth.headers"),
    ({"headers": {"X Api Key": API_KEY}}, "auth.headers"),
    ({"cookies": {"session": f"{SESSION}; admin=1"}}, "auth.cookies"),
    ({"basic": {"username": "a:b", "password": PASSWORD}}, "auth.basic"),
    ({"basic": {"username": "crawler", "password": PASSWORD}, "bearer": TOKEN}, "auth"),
    ({"bearer": f"{TOKEN} spaced"}, "auth.bearer"),
    ({"bearer": 7}, "auth.bearer"),
    ({}, "auth"),
    ({"token": TOKEN}, "auth.token"),
]


@pytest.mark.parametrize(("auth", "field"), INVALID)
def test_bad_credentials_answer_422_naming_the_field_never_the_value_and_write_nothing(
    client, app_engine, tenant: Tenant, auth: dict, field: str
):
    before = row_counts(app_engine)
    response = client.post(
        connectors(tenant), headers=tenant.headers, json={"type": "webcrawler", "urls": [URL], "auth": auth}
    )
    assert response.status_code == 422 and fields_of(response) == [field], response.text
    assert_no_secret(response.text)
    assert row_counts(app_engine) == before
    url = f"{connectors(tenant)}/{tenant.connector_id}"
    patched = client.patch(url, headers=tenant.headers, json={"auth": auth})
    assert patched.status_code == 422 and fields_of(patched) == [field]
    with session_factory(app_engine)() as session:
        assert session.get_one(Connector, tenant.connector_id).credentials is None


def test_the_schema_marks_every_secret_write_only(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    auth = schemas["AuthIn"]["properties"]
    secret = {"type": "string", "format": "password", "writeOnly": True}
    assert secret.items() <= auth["headers"]["additionalProperties"].items()
    assert secret.items() <= auth["cookies"]["additionalProperties"].items()
    assert secret.items() <= schemas["BasicIn"]["properties"]["password"].items()
    assert any(secret.items() <= option.items() for option in auth["bearer"]["anyOf"])
    assert set(schemas["AuthOut"]["properties"]) == {"basic", "bearer", "headers", "cookies"}
