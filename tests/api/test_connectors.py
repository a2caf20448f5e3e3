"""Connectors over the API: list and site crawls, bounds refused by field, and only the token's own workspace."""

from __future__ import annotations

import pytest

from tests.api.conftest import Tenant
from tests.api.test_pipelines import fields_of
from tests.support.db import row_counts


def connectors(tenant: Tenant) -> str:
    return f"/workspaces/{tenant.workspace_id}/connectors"


def test_a_site_connector_is_created_read_and_listed(client, tenant: Tenant):
    site = {
        "start_urls": ["https://docs.example.com/"],
        "max_depth": 2,
        "max_pages": 300,
        "include": ["/docs/**"],
        "exclude": ["/docs/old/*"],
        "subdomains": True,
        "drop_query_params": "all",
    }
    response = client.post(
        connectors(tenant), headers=tenant.headers, json={"type": "webcrawler", "name": "Docs", "site": site}
    )
    assert response.status_code == 201, response.text
    created = response.json()
    assert (created["mode"], created["urls"], created["site"]) == ("site", None, site)
    assert client.get(f"{connectors(tenant)}/{created['id']}", headers=tenant.headers).json() == created
    listed = client.get(connectors(tenant), headers=tenant.headers).json()["connectors"]
    assert [c["id"] for c in listed] == [tenant.connector_id, created["id"]]
    assert (listed[0]["mode"], listed[0]["urls"], listed[0]["site"]) == ("list", ["https://docs.example.com/"], None)


INVALID = [
    ({"site": {"start_urls": ["https://e.com/"], "include": ["docs/*"]}}, ["site.include"]),
    ({"site": {"start_urls": ["https://e.com/"], "max_depth": -1}}, ["site.max_depth"]),
    ({"site": {"start_urls": ["https://e.com/"], "max_pages": 10_001}}, ["site.max_pages"]),
    ({"site": {"start_urls": ["ftp://e.com/"]}}, ["site.start_urls"]),
    ({"site": {"start_urls": []}}, ["site.start_urls"]),
    ({"mode": "spider", "urls": ["https://e.com/"]}, ["mode"]),
    ({"mode": "site", "urls": ["https://e.com/"]}, ["site"]),
    ({"urls": ["https://e.com/"], "site": {"start_urls": ["https://e.com/"]}}, ["site"]),
    ({"site": {"start_urls": ["https://e.com/"], "depth": 2}}, ["site.depth"]),
]


@pytest.mark.parametrize(("body", "fields"), INVALID)
def test_bad_input_answers_422_naming_the_field_and_writes_nothing(client, app_engine, tenant, body, fields):
    before = row_counts(app_engine)
    response = client.post(connectors(tenant), headers=tenant.headers, json={"type": "webcrawler", **body})
    assert response.status_code == 422, response.text
    assert sorted(fields_of(response)) == fields
    assert row_counts(app_engine) == before


def test_another_workspaces_connector_is_not_found(client, tenant: Tenant, other: Tenant):
    assert client.get(f"{connectors(tenant)}/{other.connector_id}", headers=tenant.headers).status_code == 404
    assert client.get(connectors(other), headers=tenant.headers).status_code in {401, 403, 404}
