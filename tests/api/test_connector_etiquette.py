"""A connector's user agent and robots setting over the API: shown on every read, set, reset with null by PATCH and
by leaving them out of a PUT, and refused by field: a user agent that is not one line of printable ASCII, and
`robots: ignore` over a host the workspace does not own (its token cannot declare one: no route does)."""

from __future__ import annotations

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog.workspaces import set_owned_hosts
from tests.api.conftest import Tenant
from tests.api.test_connectors import connectors
from tests.api.test_pipelines import fields_of

URL = "https://docs.acme.example/"
AGENT = "acme-kb/1.0 (+https://acme.example/bot)"


def test_a_new_connector_sends_the_crawlers_user_agent_and_obeys_robots_txt(client, tenant: Tenant):
    shown = client.get(f"{connectors(tenant)}/{tenant.connector_id}", headers=tenant.headers).json()
    assert (shown["user_agent"], shown["robots"]) == (None, "obey")


def test_user_agent_and_robots_are_set_shown_and_reset(client, sessions, tenant: Tenant):
    with transaction(sessions) as session:
        set_owned_hosts(session, tenant.workspace_id, ["docs.acme.example"])
    made = client.post(
        connectors(tenant),
        headers=tenant.headers,
        json={"type": "webcrawler", "urls": [URL], "user_agent": AGENT, "robots": "ignore"},
    )
    assert made.status_code == 201, made.text
    assert (made.json()["user_agent"], made.json()["robots"]) == (AGENT, "ignore")
    url = f"{connectors(tenant)}/{made.json()['id']}"
    assert client.get(url, headers=tenant.headers).json() == made.json()
    renamed = client.patch(url, headers=tenant.headers, json={"name": "Docs"}).json()
    assert (renamed["user_agent"], renamed["robots"]) == (AGENT, "ignore")
    reset = client.patch(url, headers=tenant.headers, json={"user_agent": None, "robots": None}).json()
    assert (reset["user_agent"], reset["robots"]) == (None, "obey")
    client.patch(url, headers=tenant.headers, json={"user_agent": AGENT, "robots": "ignore"})
    replaced = client.put(url, headers=tenant.headers, json={"urls": [URL]}).json()
    assert (replaced["user_agent"], replaced["robots"]) == (None, "obey")


def test_a_bad_user_agent_or_a_waiver_over_a_host_not_owned_is_refused_by_field(client, tenant: Tenant):
    for body, field, says in [
        ({"user_agent": "acme\r\nX-Injected: 1"}, "user_agent", "printable ASCII on one line"),
        ({"user_agent": "x" * 257}, "user_agent", "at most 256 characters"),
        ({"robots": "sometimes"}, "robots", "'obey' or 'ignore'"),
        ({"robots": "ignore"}, "robots", "it does not own docs.acme.example"),
    ]:
        refused = client.post(
            connectors(tenant), headers=tenant.headers, json={"type": "webcrawler", "urls": [URL], **body}
        )
        assert refused.status_code == 422 and fields_of(refused) == [field], refused.text
        assert says in refused.json()["detail"][0]["message"], refused.text
    waived = f"{connectors(tenant)}/{tenant.connector_id}"
    assert fields_of(client.patch(waived, headers=tenant.headers, json={"robots": "ignore"})) == ["robots"]
