"""A connector's credentials in the app database (each backend): sealed in their own column, never in its config;
replaced, kept or cleared by an update; a change that would send kept ones to a new host refused; opened for a run
only with the right key; and sealed again under a new key by a rotation, all or nothing."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.core.catalog.connector_credentials import (
    open_credentials,
    reseal_credentials,
    shown_credentials,
)
from pipelines_dagster.core.catalog.connectors import ConnectorChanges, create_connector, update_connector
from pipelines_dagster.core.catalog.workspaces import create_workspace
from pipelines_dagster.core.crawl.credentials import Credentials
from pipelines_dagster.core.crawl.site.config import SiteConfig
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.run.plan import RunRefused, plan_run
from pipelines_dagster.core.security.keyring import Keyring, SecretsKeyError, new_key

TOKEN = "tok-catalog-8d2f41"
KEY = new_key()
KEYRING = Keyring.of(KEY, variable="PIPELINES_SECRETS_KEY")
URL = "https://staging.example.com/docs"


def connector_with(sessions: sessionmaker[Session], credentials: Credentials | None, *, urls=(URL,)) -> tuple[int, int]:
    with transaction(sessions) as session:
        workspace = create_workspace(session, name="acme", owner_user_id="u-creds").workspace
        connector = create_connector(
            session,
            workspace_id=workspace.id,
            connector_type="webcrawler",
            urls=list(urls),
            credentials=credentials,
            keyring=KEYRING,
        )
        return workspace.id, connector.id


def change(sessions, workspace_id: int, connector_id: int, *, replace: bool = False, **changes) -> Connector:
    with transaction(sessions) as session:
        return update_connector(
            session,
            workspace_id=workspace_id,
            connector_id=connector_id,
            changes=ConnectorChanges(**changes),
            replace=replace,
            keyring=KEYRING,
        )


def stored(sessions, connector_id: int) -> tuple[str, Credentials | None, dict | None]:
    """The row's credentials column as the database holds it (as text), opened, and as shown."""
    with sessions() as session:
        raw = session.execute(sa.text("SELECT credentials FROM connectors WHERE id = :id"), {"id": connector_id})
        connector = session.get_one(Connector, connector_id)
        return str(raw.scalar_one()), open_credentials(connector, KEYRING), shown_credentials(connector)


def test_they_are_sealed_in_their_own_column_and_never_in_the_config(sessions) -> None:
    _, connector_id = connector_with(sessions, Credentials(bearer=TOKEN, headers=[("X-Api-Key", "key-77aa")]))
    column, opened, shown = stored(sessions, connector_id)
    assert TOKEN not in column and "key-77aa" not in column
    assert opened is not None and opened.request_headers()["Authorization"] == f"Bearer {TOKEN}"
    assert shown == {"basic": False, "bearer": True, "headers": ["X-Api-Key"], "cookies": []}
    with sessions() as session:
        config = str(session.execute(sa.text("SELECT config FROM connectors WHERE id = :id"), {"id": connector_id}))
        assert TOKEN not in str(session.get_one(Connector, connector_id).config) and "X-Api-Key" not in config


def test_an_update_replaces_them_whole_keeps_them_when_left_out_even_on_a_replace_and_clears_them(sessions) -> None:
    workspace_id, connector_id = connector_with(sessions, Credentials(bearer=TOKEN))
    change(sessions, workspace_id, connector_id, name="renamed")
    change(sessions, workspace_id, connector_id, replace=True, urls=[URL])
    assert stored(sessions, connector_id)[2] == {"basic": False, "bearer": True, "headers": [], "cookies": []}

    change(sessions, workspace_id, connector_id, credentials=Credentials(cookies=[("session", "c-1")]))
    assert stored(sessions, connector_id)[2] == {"basic": False, "bearer": False, "headers": [], "cookies": ["session"]}

    change(sessions, workspace_id, connector_id, credentials=None)
    column, opened, shown = stored(sessions, connector_id)
    assert (column, opened, shown) == ("None", None, None)


def test_a_change_that_would_send_kept_credentials_to_a_new_host_is_refused_and_changes_nothing(sessions) -> None:
    workspace_id, connector_id = connector_with(sessions, Credentials(bearer=TOKEN))
    for changes, field, added in [
        ({"urls": [URL, "https://collector.attacker.test/"]}, "urls", "collector.attacker.test"),
        ({"urls": ["http://staging.example.com/docs"]}, "urls", "http://staging.example.com"),
        (
            {"site": SiteConfig.validated(start_urls=[URL], subdomains=True)},
            "site",
            "*.example.com",
        ),
    ]:
        with pytest.raises(InvalidInputError) as refused:
            change(sessions, workspace_id, connector_id, **changes)
        assert refused.value.field == field and added in refused.value.message
        assert "give the credentials again with it" in refused.value.message
    with sessions() as session:
        assert session.get_one(Connector, connector_id).config["INITIAL_URLS"] == [URL]
    # Other pages of the same host, or the credentials given again with the new host, are fine.
    change(sessions, workspace_id, connector_id, urls=[URL, "https://staging.example.com/api"])
    change(
        sessions, workspace_id, connector_id, urls=["https://other.example.org/"], credentials=Credentials(bearer="t2")
    )
    # Without credentials, any host.
    workspace_id, bare = connector_with(sessions, None)
    change(sessions, workspace_id, bare, urls=["https://anywhere.example.net/"])


def test_another_connector_type_takes_no_credentials(sessions) -> None:
    with transaction(sessions) as session, pytest.raises(InvalidInputError, match="takes no credentials"):
        workspace = create_workspace(session, name="acme", owner_user_id="u-notion").workspace
        create_connector(
            session,
            workspace_id=workspace.id,
            connector_type="google_drive",
            credentials=Credentials(bearer=TOKEN),
            keyring=KEYRING,
        )


def test_a_run_plan_opens_them_with_the_right_key_and_is_refused_with_a_wrong_one(sessions) -> None:
    from pipelines_dagster import services  # the pipeline over the connector, as the API makes it
    from pipelines_dagster.core.catalog.pipelines import create_pipeline

    workspace_id, connector_id = connector_with(sessions, Credentials(bearer=TOKEN))
    with transaction(sessions) as session:
        pipeline_id = create_pipeline(session, workspace_id=workspace_id, connector_id=connector_id, name="p").id
    assert services is not None
    with sessions() as session:
        plan = plan_run(session, pipeline_id, keyring=KEYRING)
        assert plan.credentials is not None
        assert plan.credentials.headers_for(URL) == {"Authorization": f"Bearer {TOKEN}"}
        assert plan.credentials.headers_for("https://elsewhere.example.org/") == {}
        assert TOKEN not in repr(plan)
        assert plan_run(session, pipeline_id, keyring=None).credentials is None  # the guards alone
        with pytest.raises(RunRefused) as refused:
            plan_run(session, pipeline_id, keyring=Keyring.of(new_key(), variable="PIPELINES_SECRETS_KEY"))
    message = str(refused.value)
    assert f"the credentials of connector {connector_id} cannot be opened" in message
    assert "set PIPELINES_SECRETS_KEY to the key it was sealed under" in message and "not started" in message


@pytest.fixture
def only_these(sessions) -> None:
    """A rotation seals every connector's credentials: those earlier tests left (the PostgreSQL database lives as
    long as the session) are cleared first, some being sealed under keys a rotation here is not given."""
    with transaction(sessions) as session:
        session.execute(sa.update(Connector).values(credentials=None))


@pytest.mark.usefixtures("only_these")
def test_a_rotation_seals_every_credential_again_under_the_newest_key(sessions) -> None:
    ids = [connector_with(sessions, Credentials(bearer=f"{TOKEN}-{n}"))[1] for n in range(3)]
    new = new_key()
    rotating = Keyring.of(f"{new},{KEY}", variable="K")
    with transaction(sessions) as session:
        assert reseal_credentials(session, rotating) == 3
    only_new = Keyring.of(new, variable="K")
    with sessions() as session:
        for n, connector_id in enumerate(ids):
            opened = open_credentials(session.get_one(Connector, connector_id), only_new)
            assert opened is not None and opened.request_headers()["Authorization"] == f"Bearer {TOKEN}-{n}"
            with pytest.raises(SecretsKeyError):
                open_credentials(session.get_one(Connector, connector_id), KEYRING)


@pytest.mark.usefixtures("only_these")
def test_a_rotation_that_cannot_open_one_credential_seals_none_again(sessions) -> None:
    _, sealed_elsewhere = connector_with(sessions, Credentials(bearer=TOKEN))
    with transaction(sessions) as session:
        foreign = Keyring.of(new_key(), variable="K").seal(Credentials(bearer="other").to_json())
        row = session.get_one(Connector, sealed_elsewhere)
        row.credentials = {**(row.credentials or {}), "sealed": foreign}
    _, kept = connector_with(sessions, Credentials(bearer=TOKEN))
    before = stored(sessions, kept)[0]
    with transaction(sessions) as session, pytest.raises(SecretsKeyError) as refused:
        reseal_credentials(session, Keyring.of(f"{new_key()},{KEY}", variable="K"))
    assert f"connector {sealed_elsewhere} " in str(refused.value) and "nothing was sealed again" in str(refused.value)
    assert stored(sessions, kept)[0] == before
