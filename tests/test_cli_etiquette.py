"""`workspace update --owned-host|--no-owned-hosts` and `connector create|update --user-agent|--default-user-agent
|--robots`: hosts declared and shown, a user agent and a robots.txt waiver set, shown as the API shows them, reset,
and refused by option with what to do."""

from __future__ import annotations

from tests.test_cli import api, cli, workspace  # noqa: F401  (fixtures)
from tests.test_cli_connectors import connector_url

URL = "https://docs.acme.example/"
AGENT = "acme-kb/1.0"


def test_an_operator_declares_owned_hosts_and_gives_them_up(cli, workspace):
    ws = str(workspace["id"])
    declared = cli.json(
        "workspace", "update", "--workspace", ws, "--owned-host", "Docs.Acme.Example", "--owned-host", "10.0.0.7"
    )
    assert declared["owned_hosts"] == ["docs.acme.example", "10.0.0.7"]
    assert cli("workspace", "show", "--workspace", ws).output.split("\t")[4] == "owns docs.acme.example, 10.0.0.7"
    refused = cli("workspace", "update", "--workspace", ws, "--owned-host", "https://docs.acme.example/", ok=False)
    assert "Error: --owned-host: a host is a name like docs.example.com (no scheme, port or path)" in refused.output
    assert (
        "give --owned-host (repeatable) or --no-owned-hosts"
        in cli("workspace", "update", "--workspace", ws, ok=False).output
    )
    assert cli.json("workspace", "update", "--workspace", ws, "--no-owned-hosts")["owned_hosts"] == []


def test_a_connector_takes_a_user_agent_and_ignores_robots_txt_only_on_owned_hosts(cli, workspace, api):
    ws = str(workspace["id"])
    create = ["connector", "create", "--workspace", ws, "--type", "webcrawler", "--url", URL]
    refused = cli(*create, "--robots", "ignore", ok=False).output
    assert "Error: --robots: robots.txt can be ignored only on hosts the workspace owns" in refused
    assert "pipelines-dagster workspace update --owned-host HOST" in refused
    cli("workspace", "update", "--workspace", ws, "--owned-host", "docs.acme.example")
    made = cli.json(*create, "--robots", "ignore", "--user-agent", AGENT)
    assert (made["user_agent"], made["robots"]) == (AGENT, "ignore")
    assert made == api.get(connector_url(workspace, made["id"])).json()
    update = ["connector", "update", "--workspace", ws, "--connector", str(made["id"])]
    assert cli(*update, "--name", "Docs").output.endswith(
        f"1 URL, render never (list default), user agent {AGENT!r}, ignoring robots.txt on its owned hosts\n"
    )
    moved = cli(*update, "--url", "https://partner.example.org/", ok=False).output
    assert "Error: --url: robots.txt can be ignored only on hosts the workspace owns" in moved
    assert (
        "give --user-agent or --default-user-agent, not both"
        in cli(*update, "--default-user-agent", "--user-agent", "x", ok=False).output
    )
    reset = cli.json(*update, "--default-user-agent", "--robots", "obey")
    assert (reset["user_agent"], reset["robots"]) == (None, "obey")
    assert (
        "Error: --user-agent: a user agent is printable ASCII"
        in cli(*update, "--user-agent", "two\nlines", ok=False).output
    )
