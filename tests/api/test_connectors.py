"""Connectors over the API: list and site crawls, bounds refused by field, the render setting and its default per
crawl mode, partial update (PATCH), replacement (PUT), deletion refused while a pipeline crawls the connector, and
only the token's own workspace."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from pipelines_dagster.app_db.engine import session_factory
from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.core.crawl.render.rule import RENDER_KEY
from tests.api.conftest import Tenant, new_tenant
from tests.api.test_pipelines import create, fields_of, partitions
from tests.api.test_unique_races import served  # noqa: F401  (fixture)
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
    ({"urls": ["https://e.com/"], "render": "sometimes"}, ["render"]),
    ({"urls": ["https://e.com/"], "render": True}, ["render"]),
    ({"type": "google_drive", "render": "always"}, ["render"]),
]


@pytest.mark.parametrize(("body", "fields"), INVALID)
def test_bad_input_answers_422_naming_the_field_and_writes_nothing(client, app_engine, tenant, body, fields):
    before = row_counts(app_engine)
    response = client.post(connectors(tenant), headers=tenant.headers, json={"type": "webcrawler", **body})
    assert response.status_code == 422, response.text
    assert sorted(fields_of(response)) == fields
    assert row_counts(app_engine) == before


def test_another_workspaces_connector_is_not_found(client, tenant: Tenant, other: Tenant):
    theirs = f"{connectors(tenant)}/{other.connector_id}"
    assert client.get(theirs, headers=tenant.headers).status_code == 404
    assert client.patch(theirs, headers=tenant.headers, json={"name": "mine"}).status_code == 404
    assert client.patch(theirs, headers=tenant.headers, json={"render": "always"}).status_code == 404
    assert client.put(theirs, headers=tenant.headers, json={"urls": ["https://e.com/"]}).status_code == 404
    assert client.delete(theirs, headers=tenant.headers).status_code == 404
    theirs_now = client.get(f"{connectors(other)}/{other.connector_id}", headers=other.headers).json()
    assert (theirs_now["name"], theirs_now["render"], theirs_now["render_chosen"]) == (
        "webcrawler connector",
        "never",
        False,
    )
    assert client.get(connectors(other), headers=tenant.headers).status_code in {401, 403, 404}


SITE = {
    "start_urls": ["https://docs.example.com/"],
    "max_depth": 2,
    "max_pages": 300,
    "include": ["/docs/**"],
    "exclude": [],
    "subdomains": False,
    "drop_query_params": [],
}


def test_patch_changes_only_the_fields_given_and_switches_between_list_and_site(client, tenant: Tenant):
    url = f"{connectors(tenant)}/{tenant.connector_id}"
    before = client.get(url, headers=tenant.headers).json()
    renamed = client.patch(url, headers=tenant.headers, json={"name": "Docs"})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json() == {**before, "name": "Docs"}
    to_site = client.patch(url, headers=tenant.headers, json={"site": SITE}).json()
    assert (to_site["name"], to_site["mode"], to_site["urls"], to_site["site"]) == ("Docs", "site", None, SITE)
    to_list = client.patch(url, headers=tenant.headers, json={"mode": "list", "urls": ["https://e.com/a"]}).json()
    assert (to_list["mode"], to_list["urls"], to_list["site"]) == ("list", ["https://e.com/a"], None)
    assert client.get(url, headers=tenant.headers).json() == to_list


def test_put_replaces_the_connector_as_a_whole(client, tenant: Tenant):
    url = f"{connectors(tenant)}/{tenant.connector_id}"
    client.patch(url, headers=tenant.headers, json={"name": "Docs"})
    replaced = client.put(url, headers=tenant.headers, json={"site": SITE})
    assert replaced.status_code == 200, replaced.text
    # The name left out is the default one again, as on creation.
    assert (replaced.json()["name"], replaced.json()["mode"], replaced.json()["site"]) == (
        "webcrawler connector",
        "site",
        SITE,
    )
    assert fields_of(client.put(url, headers=tenant.headers, json={"name": "Docs"})) == ["urls"]


UPDATE_INVALID = [
    ({"name": None}, ["name"]),
    ({"urls": ["https://e.com/"], "site": {"start_urls": ["https://e.com/"]}}, ["site"]),
    ({"urls": ["ftp://e.com/"]}, ["urls"]),
    ({"urls": []}, ["urls"]),
    ({"mode": "list"}, ["urls"]),
    ({"mode": "site"}, ["site"]),
    ({"site": {"start_urls": ["https://e.com/"], "max_depth": -1}}, ["site.max_depth"]),
    ({"type": "dropbox"}, ["type"]),
    ({"render": "sometimes"}, ["render"]),
]


@pytest.mark.parametrize(("body", "fields"), UPDATE_INVALID)
@pytest.mark.parametrize("method", ["PATCH", "PUT"])
def test_bad_update_answers_422_naming_the_field_and_changes_nothing(client, tenant: Tenant, method, body, fields):
    if method == "PUT" and body == {"name": None}:
        body = {"name": ""}
    url = f"{connectors(tenant)}/{tenant.connector_id}"
    before = client.get(url, headers=tenant.headers).json()
    assert sorted(fields_of(client.request(method, url, headers=tenant.headers, json=body))) == fields
    assert client.get(url, headers=tenant.headers).json() == before


def test_delete_is_refused_while_a_pipeline_crawls_the_connector(client, tenant: Tenant):
    url = f"{connectors(tenant)}/{tenant.connector_id}"
    made = create(client, tenant, name="Docs nightly").json()
    refused = client.delete(url, headers=tenant.headers)
    assert refused.status_code == 409, refused.text
    assert f"pipeline {made['id']} (Docs nightly)" in refused.json()["detail"]
    assert client.get(url, headers=tenant.headers).status_code == 200
    assert client.delete(f"{tenant.pipelines}/{made['id']}", headers=tenant.headers).status_code == 204
    assert client.delete(url, headers=tenant.headers).status_code == 204
    assert client.get(url, headers=tenant.headers).status_code == 404
    assert client.delete(url, headers=tenant.headers).status_code == 404


def test_delete_takes_the_connectors_own_indexing_and_its_partition_with_it(client, instance, tenant: Tenant):
    made = client.post(
        connectors(tenant),
        headers=tenant.headers,
        json={"type": "webcrawler", "urls": ["https://e.com/"], "index_every_minutes": 60},
    ).json()
    [own] = [p for p in client.get(tenant.pipelines, headers=tenant.headers).json()["pipelines"] if p["system_managed"]]
    assert own["partition_key"] in partitions(instance)
    assert client.delete(f"{connectors(tenant)}/{made['id']}", headers=tenant.headers).status_code == 204
    assert client.get(f"{tenant.pipelines}/{own['id']}", headers=tenant.headers).status_code == 404
    assert own["partition_key"] not in partitions(instance)


def test_a_pipeline_made_while_its_connector_is_deleted_is_never_deleted_with_it(served, postgres_engine):
    """A delete racing a pipeline's creation either sees the pipeline and refuses, or comes first and the
    pipeline is refused: never both succeed, which would leave a pipeline answered 201 and gone by cascade."""
    sessions = session_factory(postgres_engine)
    tenant = new_tenant(sessions)
    outcomes: Counter[tuple[int, int]] = Counter()
    start = threading.Barrier(2)
    for round_ in range(15):
        made = httpx.post(
            f"{served}{connectors(tenant)}",
            headers=tenant.headers,
            json={"type": "webcrawler", "urls": ["https://e.com/"]},
        ).json()

        def delete(http: httpx.Client, connector_id: int = made["id"]) -> httpx.Response:
            start.wait()
            return http.delete(f"{served}{connectors(tenant)}/{connector_id}", headers=tenant.headers)

        def create(http: httpx.Client, connector_id: int = made["id"], name: str = f"p{round_}") -> httpx.Response:
            start.wait()
            body = {"name": name, "connector_id": connector_id}
            return http.post(f"{served}{tenant.pipelines}", headers=tenant.headers, json=body)

        with ThreadPoolExecutor(2) as pool, httpx.Client(timeout=60) as one, httpx.Client(timeout=60) as two:
            deleted, created = (future.result() for future in [pool.submit(delete, one), pool.submit(create, two)])
        outcomes[deleted.status_code, created.status_code] += 1
        assert (deleted.status_code, created.status_code) in {(409, 201), (204, 422), (204, 409)}, (
            deleted.text,
            created.text,
        )
        if created.status_code == 201:
            assert httpx.get(f"{served}{tenant.pipelines}/{created.json()['id']}", headers=tenant.headers).is_success
    assert sum(outcomes.values()) == 15, outcomes


def render_of(shown: dict) -> tuple[str, str, bool]:
    return shown["mode"], shown["render"], shown["render_chosen"]


def stored_render(sessions, connector_id: int) -> str | None:
    with sessions() as session:
        return session.get(Connector, connector_id).config.get(RENDER_KEY)


def test_render_defaults_to_never_for_a_list_and_auto_for_a_site_and_a_choice_is_kept(client, sessions, tenant):
    listed, site = {"urls": ["https://e.com/"]}, {"site": {"start_urls": ["https://e.com/"]}}
    bodies = [listed, site, {**listed, "render": "always"}, {**site, "render": "never"}]
    made = [
        client.post(connectors(tenant), headers=tenant.headers, json={"type": "webcrawler", **body}).json()
        for body in bodies
    ]
    assert [render_of(shown) for shown in made] == [
        ("list", "never", False),
        ("site", "auto", False),
        ("list", "always", True),
        ("site", "never", True),
    ]
    # A default is not stored, so it follows the mode; a choice is stored as given.
    assert [stored_render(sessions, shown["id"]) for shown in made] == [None, None, "always", "never"]
    for shown in made:
        assert client.get(f"{connectors(tenant)}/{shown['id']}", headers=tenant.headers).json() == shown
    every = client.get(connectors(tenant), headers=tenant.headers).json()["connectors"]
    assert every[1:] == made


def test_switching_the_mode_brings_its_default_render_unless_one_was_chosen(client, sessions, tenant: Tenant):
    url = f"{connectors(tenant)}/{tenant.connector_id}"

    def patch(body: dict) -> tuple[str, str, bool]:
        answer = client.patch(url, headers=tenant.headers, json=body)
        assert answer.status_code == 200, answer.text
        return render_of(answer.json())

    assert patch({"site": SITE}) == ("site", "auto", False)
    assert patch({"mode": "list", "urls": ["https://e.com/"]}) == ("list", "never", False)
    assert patch({"render": "always"}) == ("list", "always", True)
    assert patch({"site": SITE}) == ("site", "always", True)
    assert patch({"name": "Docs"}) == ("site", "always", True)
    # Null gives back the mode's default, which then follows the mode again.
    assert patch({"render": None}) == ("site", "auto", False)
    assert stored_render(sessions, tenant.connector_id) is None
    assert patch({"urls": ["https://e.com/"]}) == ("list", "never", False)
    assert client.get(url, headers=tenant.headers).json()["render"] == "never"


def test_put_takes_the_render_given_and_the_modes_default_when_left_out(client, sessions, tenant: Tenant):
    url = f"{connectors(tenant)}/{tenant.connector_id}"
    chosen = client.put(url, headers=tenant.headers, json={"site": SITE, "render": "never"})
    assert chosen.status_code == 200, chosen.text
    assert render_of(chosen.json()) == ("site", "never", True)
    left_out = client.put(url, headers=tenant.headers, json={"site": SITE})
    assert render_of(left_out.json()) == ("site", "auto", False)
    assert stored_render(sessions, tenant.connector_id) is None


def test_a_bad_render_is_answered_with_the_choices_and_changes_nothing(client, tenant: Tenant):
    url = f"{connectors(tenant)}/{tenant.connector_id}"
    client.patch(url, headers=tenant.headers, json={"render": "always"})
    before = client.get(url, headers=tenant.headers).json()
    body = {"urls": ["https://e.com/b"], "render": "js"}
    for method in ("PATCH", "PUT"):
        refused = client.request(method, url, headers=tenant.headers, json=body)
        assert refused.status_code == 422, refused.text
        [error] = refused.json()["detail"]
        assert error["field"] == "render"
        assert all(choice in error["message"] for choice in ("'never'", "'auto'", "'always'")), error
    assert client.get(url, headers=tenant.headers).json() == before
    drive = client.post(connectors(tenant), headers=tenant.headers, json={"type": "google_drive", "render": "auto"})
    assert drive.json()["detail"] == [
        {"field": "render", "message": "a google_drive connector fetches no web pages, so it takes no render"}
    ]
