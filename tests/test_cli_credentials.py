"""Credentials from the CLI: `connector create|update --auth-basic|--auth-bearer|--header|--cookie` and `--no-auth`,
shown as the API shows them (kinds and names), refused by option without repeating a value, sealed under the data
dir's key file made on first use; and `secrets new-key|rotate` under the key file or PIPELINES_SECRETS_KEY."""

from __future__ import annotations

import stat

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.core.catalog.connector_credentials import open_credentials
from pipelines_dagster.core.security.keyring import Keyring, SecretsKeyError, new_key, split_keys
from pipelines_dagster.settings import load_settings
from tests.test_cli import api, cli, workspace  # noqa: F401  (fixtures)
from tests.test_cli_connectors import connector_url

PASSWORD = "pw-cli-1d7e3a"
TOKEN = "tok-cli-98b2c4"
API_KEY = "key-cli-5a6f0e"
SESSION = "sess-cli-c3d1b9"
SECRETS = (PASSWORD, TOKEN, API_KEY, SESSION)
URL = "https://staging.example.com/docs"


def create(cli, workspace: dict, *options: str) -> dict:
    return cli.json(
        "connector", "create", "--workspace", str(workspace["id"]), "--type", "webcrawler", "--url", URL, *options
    )


def opened(cli, connector_id: int, keyring: Keyring):
    with Session(cli.engine()) as session:
        return open_credentials(session.get_one(Connector, connector_id), keyring)


def column(cli, connector_id: int) -> str:
    with cli.engine().connect() as connection:
        return str(
            connection.execute(sa.text(f"SELECT credentials FROM connectors WHERE id = {connector_id}")).scalar()
        )


def test_create_takes_every_kind_shows_names_only_and_seals_them_under_a_key_file_made_for_them(
    cli, workspace, api, tmp_path
):
    key_file = tmp_path / "data" / "secrets.key"
    assert not key_file.exists()
    made = cli(
        *("connector", "create", "--workspace", str(workspace["id"]), "--type", "webcrawler", "--url", URL),
        *("--auth-basic", f"crawler:{PASSWORD}", "--header", f"X-Api-Key: {API_KEY}"),
        *("--cookie", f"session={SESSION}", "--cookie", "theme=dark", "--json"),
    )
    shown = cli.json_of(made)
    assert shown["auth"] == {"basic": True, "bearer": False, "headers": ["X-Api-Key"], "cookies": ["session", "theme"]}
    assert shown == api.get(connector_url(workspace, shown["id"])).json()
    line = cli("connector", "show", "--workspace", str(workspace["id"]), "--connector", str(shown["id"])).output
    assert line.endswith(
        "1 URL, render never (list default), credentials: basic auth, header X-Api-Key, cookie session, cookie theme\n"
    )
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    for printed in (made.output, line, column(cli, shown["id"])):
        assert not [secret for secret in SECRETS if secret in printed]
    credentials = opened(cli, shown["id"], Keyring.in_file(key_file, variable="PIPELINES_SECRETS_KEY"))
    assert credentials is not None and credentials.request_headers()["X-Api-Key"] == API_KEY


def test_update_replaces_them_clears_them_with_no_auth_and_refuses_a_new_host_for_kept_ones(cli, workspace):
    made = create(cli, workspace, "--auth-bearer", TOKEN)
    update = ["connector", "update", "--workspace", str(workspace["id"]), "--connector", str(made["id"])]
    assert cli.json(*update, "--name", "Staging")["auth"] == made["auth"]
    refused = cli(*update, "--url", "https://collector.example.net/", ok=False).output
    assert "Error: --url: the connector's credentials go only to its own hosts" in refused
    replaced = cli.json(*update, "--url", "https://collector.example.net/", "--header", f"X-Api-Key: {API_KEY}")
    assert replaced["auth"] == {"basic": False, "bearer": False, "headers": ["X-Api-Key"], "cookies": []}
    assert (
        "give --auth-basic, --auth-bearer, --header, --cookie or --no-auth, not both"
        in cli(*update, "--no-auth", "--cookie", "a=1", ok=False).output
    )
    assert cli.json(*update, "--no-auth")["auth"] is None
    assert column(cli, made["id"]) == "None"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--auth-basic", PASSWORD], "Error: --auth-basic: give it as USER:PASSWORD"),
        (["--auth-bearer", f"{TOKEN} {TOKEN}"], "Error: --auth-bearer: a bearer token is letters"),
        (["--header", f"Host: {API_KEY}"], "Error: --header: header Host cannot be set: the host is the URL's"),
        (["--header", API_KEY], "Error: --header: give it as 'Name: value'"),
        (["--cookie", f"session={SESSION};x=1"], "Error: --cookie: the value of cookie session may hold no space"),
        (["--auth-basic", f"a:{PASSWORD}", "--auth-bearer", TOKEN], "give basic auth or a bearer token, not both"),
    ],
)
def test_bad_credentials_are_named_by_their_option_without_the_value_and_write_nothing(cli, workspace, options, says):
    before = cli.json("connector", "list", "--workspace", str(workspace["id"]))
    output = cli(
        *("connector", "create", "--workspace", str(workspace["id"]), "--type", "webcrawler", "--url", URL),
        *options,
        ok=False,
    ).output
    assert says in output
    assert not [secret for secret in SECRETS if secret in output]
    assert cli.json("connector", "list", "--workspace", str(workspace["id"])) == before


def test_rotating_the_key_file_seals_every_credential_under_a_new_key_and_keeps_only_it(cli, workspace, tmp_path):
    made = [create(cli, workspace, "--auth-bearer", f"{TOKEN}{n}") for n in range(2)]
    key_file = tmp_path / "data" / "secrets.key"
    old = split_keys(key_file.read_text())
    rotated = cli("secrets", "rotate").output
    assert rotated == f"the credentials of 2 connectors sealed again under a new key; {key_file} holds only it\n"
    new = split_keys(key_file.read_text())
    assert len(new) == 1 and new != old and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    for n, connector in enumerate(made):
        credentials = opened(cli, connector["id"], Keyring.of(new[0], variable="K"))
        assert credentials is not None and credentials.request_headers()["Authorization"] == f"Bearer {TOKEN}{n}"
        with pytest.raises(SecretsKeyError):
            opened(cli, connector["id"], Keyring.of(old[0], variable="K"))


def test_rotating_under_the_variable_takes_the_new_key_first_and_the_old_after_it(cli, workspace, monkeypatch):
    old, new = new_key(), new_key()
    monkeypatch.setenv("PIPELINES_SECRETS_KEY", old)
    made = create(cli, workspace, "--auth-bearer", TOKEN)
    refused = cli("secrets", "rotate", ok=False).output
    assert "PIPELINES_SECRETS_KEY holds one key, so there is nothing to rotate from" in refused and old not in refused
    monkeypatch.setenv("PIPELINES_SECRETS_KEY", f"{new},{old}")
    assert cli("secrets", "rotate").output.startswith("the credentials of 1 connector sealed again under the first key")
    monkeypatch.setenv("PIPELINES_SECRETS_KEY", new)
    credentials = opened(cli, made["id"], load_settings().keyring())
    assert credentials is not None and credentials.request_headers()["Authorization"] == f"Bearer {TOKEN}"


def test_a_malformed_key_stops_every_command_naming_the_variable_not_the_key(cli, workspace, monkeypatch):
    monkeypatch.setenv("PIPELINES_SECRETS_KEY", "my-passphrase-not-a-key")
    output = cli("connector", "list", "--workspace", str(workspace["id"]), ok=False).output
    assert "PIPELINES_SECRETS_KEY: key 1 of PIPELINES_SECRETS_KEY is not a Fernet key" in output
    assert "pipelines-dagster secrets new-key" in output and "my-passphrase" not in output


def test_new_key_prints_a_key_the_variable_takes(cli):
    key = cli("secrets", "new-key").output.strip()
    assert (
        Keyring.of(key, variable="PIPELINES_SECRETS_KEY").size == 1 and key != cli("secrets", "new-key").output.strip()
    )
