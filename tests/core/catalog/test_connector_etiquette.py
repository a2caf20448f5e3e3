"""A connector's user agent and robots setting in the catalog (each backend): set, kept and reset by updates;
`robots: ignore` taken only over hosts the workspace owns, kept only while a change of URLs stays on them; and the
run plan waiving robots.txt only on the hosts the workspace owns when it runs."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.core.catalog.connectors import create_connector
from pipelines_dagster.core.catalog.pipelines import create_pipeline
from pipelines_dagster.core.catalog.workspaces import create_workspace, set_owned_hosts
from pipelines_dagster.core.crawl.etiquette import robots_of, user_agent_of
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.run.plan import plan_run
from tests.core.catalog.test_connector_credentials import change

DOCS = "https://docs.acme.example/guide"
WIKI = "https://wiki.acme.example/"


def workspace_owning(sessions: sessionmaker[Session], *hosts: str) -> int:
    with transaction(sessions) as session:
        workspace_id = create_workspace(session, name="acme", owner_user_id="u-robots").workspace.id
        set_owned_hosts(session, workspace_id, list(hosts))
        return workspace_id


def connector(sessions, workspace_id: int, urls: list[str], **fields) -> int:
    with transaction(sessions) as session:
        return create_connector(session, workspace_id=workspace_id, connector_type="webcrawler", urls=urls, **fields).id


def config(sessions, connector_id: int) -> dict:
    with sessions() as session:
        return dict(session.get_one(Connector, connector_id).config)


def test_a_user_agent_is_set_kept_reset_and_checked(sessions) -> None:
    workspace_id = workspace_owning(sessions)
    made = connector(sessions, workspace_id, [DOCS], user_agent="acme-kb/1.0")
    assert user_agent_of(config(sessions, made)) == "acme-kb/1.0"
    change(sessions, workspace_id, made, name="renamed")
    assert user_agent_of(config(sessions, made)) == "acme-kb/1.0"
    change(sessions, workspace_id, made, replace=True, urls=[DOCS])  # PUT: left out is the default
    assert user_agent_of(config(sessions, made)) is None
    change(sessions, workspace_id, made, user_agent="acme-kb/2.0")
    change(sessions, workspace_id, made, user_agent=None)
    assert user_agent_of(config(sessions, made)) is None
    with pytest.raises(InvalidInputError, match="printable ASCII"):
        change(sessions, workspace_id, made, user_agent="acme\r\nX-Injected: 1")
    with pytest.raises(InvalidInputError, match="takes no user_agent"), transaction(sessions) as session:
        create_connector(session, workspace_id=workspace_id, connector_type="dropbox", user_agent="acme-kb/1.0")


def test_ignoring_robots_txt_is_taken_only_over_hosts_the_workspace_owns(sessions) -> None:
    workspace_id = workspace_owning(sessions, "docs.acme.example", "wiki.acme.example")
    waived = connector(sessions, workspace_id, [DOCS, WIKI], robots="ignore")
    assert robots_of(config(sessions, waived)).value == "ignore"
    with pytest.raises(InvalidInputError) as refused:
        connector(sessions, workspace_id, [DOCS, "https://partner.example.org/"], robots="ignore")
    assert refused.value.field == "robots" and "does not own partner.example.org" in refused.value.message
    site = SiteConfig.validated(start_urls=[DOCS], subdomains=True)
    with pytest.raises(InvalidInputError, match="over subdomains"):
        connector(sessions, workspace_id, [], site=site, robots="ignore")

    # A change of URLs keeps the waiver only on owned hosts, and is named by the field that changed them.
    with pytest.raises(InvalidInputError) as moved:
        change(sessions, workspace_id, waived, urls=["https://partner.example.org/"])
    assert moved.value.field == "urls" and "does not own partner.example.org" in moved.value.message
    with pytest.raises(InvalidInputError) as widened:
        change(sessions, workspace_id, waived, site=site)
    assert widened.value.field == "site"
    change(sessions, workspace_id, waived, urls=[WIKI])
    change(sessions, workspace_id, waived, urls=["https://partner.example.org/"], robots="obey")
    assert "ROBOTS" not in config(sessions, waived)  # obeying is the default, not stored


def test_the_plan_waives_robots_txt_only_on_the_hosts_the_workspace_owns_when_it_runs(sessions) -> None:
    workspace_id = workspace_owning(sessions, "docs.acme.example", "wiki.acme.example")
    waived = connector(sessions, workspace_id, [DOCS, WIKI], robots="ignore", user_agent="acme-kb/1.0")
    obeying = connector(sessions, workspace_id, [DOCS])
    with transaction(sessions) as session:
        pipelines = [
            create_pipeline(session, workspace_id=workspace_id, connector_id=made, name=f"p{made}").id
            for made in (waived, obeying)
        ]
    with sessions() as session:
        plan = plan_run(session, pipelines[0], keyring=None)
        assert (plan.user_agent, plan.robots_waived) == ("acme-kb/1.0", {"docs.acme.example", "wiki.acme.example"})
        assert plan_run(session, pipelines[1], keyring=None).robots_waived == frozenset()
    with transaction(sessions) as session:
        set_owned_hosts(session, workspace_id, ["wiki.acme.example"])  # the operator gives one up
    with sessions() as session:
        assert plan_run(session, pipelines[0], keyring=None).robots_waived == {"wiki.acme.example"}
