"""`connector list|show|update|delete`: what they print is what the API answers for the same connector, the render
setting and its default per crawl mode, bad input is named by its option with nothing written, and a connector a
pipeline crawls is not deleted."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines_dagster.api.schemas.common import DeletedOut
from pipelines_dagster.partitions import PARTITIONS_NAME
from tests.support.db import row_counts
from tests.test_cli import api, as_model, cli, connector, workspace  # noqa: F401  (fixtures)


def connector_url(workspace: dict, connector_id: int) -> str:
    return f"/workspaces/{workspace['id']}/connectors/{connector_id}"


def test_list_and_show_print_what_the_api_answers(cli, workspace, connector, api):
    ws = str(workspace["id"])
    site = cli.json("connector", "create", "--workspace", ws, "--type", "webcrawler", "--start-url", "https://e.com/")
    assert cli.json("connector", "list", "--workspace", ws) == api.get(f"/workspaces/{ws}/connectors").json()
    for made in (connector, site):
        shown = cli.json("connector", "show", "--workspace", ws, "--connector", str(made["id"]))
        assert shown == made == api.get(connector_url(workspace, made["id"])).json()
    lines = cli("connector", "list", "--workspace", ws).output.splitlines()
    assert lines == [
        f"{connector['id']}\twebcrawler connector\twebcrawler\t1 URL, render never (list default)",
        f"{site['id']}\twebcrawler connector\twebcrawler\tsite crawl of https://e.com/, render auto (site default)",
    ]
    empty = cli.json("workspace", "create", "--name", "Empty", "--owner", "user-2")
    assert (
        cli("connector", "list", "--workspace", str(empty["id"])).output
        == f"workspace {empty['id']} has no connectors\n"
    )
    assert "workspace 999 does not exist" in cli("connector", "list", "--workspace", "999", ok=False).output


def test_update_changes_only_what_is_given_as_patch_does(cli, workspace, connector, api):
    ws, cid = str(workspace["id"]), str(connector["id"])
    update = ["connector", "update", "--workspace", ws, "--connector", cid]
    renamed = cli.json(*update, "--name", "Docs")
    assert renamed == {**connector, "name": "Docs"} == api.get(connector_url(workspace, connector["id"])).json()
    to_site = cli.json(*update, "--start-url", "https://docs.example.com/", "--max-depth", "1", "--include", "/docs/**")
    assert (to_site["name"], to_site["mode"], to_site["urls"]) == ("Docs", "site", None)
    assert (to_site["site"]["start_urls"], to_site["site"]["max_depth"], to_site["site"]["include"]) == (
        ["https://docs.example.com/"],
        1,
        ["/docs/**"],
    )
    patched = api.patch(connector_url(workspace, connector["id"]), json={"urls": ["https://e.com/a"]}).json()
    assert cli.json("connector", "show", "--workspace", ws, "--connector", cid) == patched
    to_list = cli.json(*update, "--mode", "list", "--url", "https://e.com/b", "--url", "https://e.com/c")
    assert (to_list["mode"], to_list["urls"], to_list["site"]) == ("list", ["https://e.com/b", "https://e.com/c"], None)
    assert cli(*update, "--name", "Handbook").output == (
        f"{cid}\tHandbook\twebcrawler\t2 URLs, render never (list default)\n"
    )


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--name", " "], "--name: must not be empty"),
        (["--url", "ftp://e.com/"], "--url: "),
        (["--mode", "list"], "--url: a list crawl needs its URLs"),
        (["--mode", "site"], "--start-url"),
        (["--url", "https://e.com/", "--start-url", "https://e.com/"], "--start-url: "),
        (["--max-depth", "2"], "--max-depth: bounds a site crawl"),
        (["--start-url", "https://e.com/", "--max-depth", "-1"], "--max-depth"),
        (["--render", "sometimes"], "'sometimes' is not one of 'never', 'auto', 'always'"),
        (["--render", "auto", "--default-render"], "--default-render: give --render or --default-render, not both"),
    ],
)
def test_update_bad_input_names_the_option_and_changes_nothing(cli, workspace, connector, extra, reason):
    before = row_counts(cli.engine())
    of_connector = ["--workspace", str(workspace["id"]), "--connector", str(connector["id"])]
    result = cli("connector", "update", *of_connector, *extra, ok=False)
    assert reason in result.output
    assert row_counts(cli.engine()) == before
    assert cli.json("connector", "show", *of_connector) == connector


def test_commands_refuse_another_workspaces_connector(cli, workspace, connector):
    other = cli.json("workspace", "create", "--name", "Other", "--owner", "user-2")
    theirs = ["--workspace", str(other["id"]), "--connector", str(connector["id"])]
    for command in (["show"], ["update", "--name", "mine"], ["delete"]):
        result = cli("connector", command[0], *theirs, *command[1:], ok=False)
        assert f"connector {connector['id']} is not in workspace {other['id']}" in result.output
    assert cli.json("connector", "show", "--workspace", str(workspace["id"]), "--connector", str(connector["id"])) == (
        connector
    )


def test_delete_is_refused_while_a_pipeline_crawls_the_connector(cli, workspace, connector, api):
    ws, cid = str(workspace["id"]), str(connector["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", cid, "--name", "Docs nightly")
    before = row_counts(cli.engine())
    refused = cli("connector", "delete", "--workspace", ws, "--connector", cid, ok=False)
    assert (
        f"connector {cid} is crawled by pipeline {made['id']} (Docs nightly); "
        "delete it or give it another connector first" in refused.output
    )
    assert row_counts(cli.engine()) == before
    cli("pipeline", "delete", "--workspace", ws, "--pipeline", str(made["id"]))
    deleted = cli.json("connector", "delete", "--workspace", ws, "--connector", cid)
    assert as_model(DeletedOut, deleted) == deleted == {"id": connector["id"], "deleted": True}
    assert api.get(connector_url(workspace, connector["id"])).status_code == 404
    assert cli("connector", "delete", "--workspace", ws, "--connector", cid, ok=False).output.startswith("Error: ")


def test_delete_takes_the_connectors_own_indexing_and_its_partition_with_it(cli, workspace, tmp_path):
    ws = str(workspace["id"])
    made = cli.json(
        *("connector", "create", "--workspace", ws, "--type", "webcrawler"),
        *("--url", "https://e.com/", "--index-every-minutes", "60"),
    )
    [own] = [p for p in cli.json("pipeline", "list", "--workspace", ws)["pipelines"] if p["system_managed"]]
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster-home")) as instance:
        assert own["partition_key"] in instance.get_dynamic_partitions(PARTITIONS_NAME)
    assert cli("connector", "delete", "--workspace", ws, "--connector", str(made["id"])).output == (
        f"connector {made['id']} deleted\n"
    )
    assert own["id"] not in [p["id"] for p in cli.json("pipeline", "list", "--workspace", ws)["pipelines"]]
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster-home")) as instance:
        assert own["partition_key"] not in instance.get_dynamic_partitions(PARTITIONS_NAME)


def test_render_is_chosen_shown_and_given_back_to_the_modes_default(cli, workspace, api):
    ws = str(workspace["id"])
    create = ["connector", "create", "--workspace", ws, "--type", "webcrawler"]
    made = cli.json(*create, "--url", "https://e.com/", "--render", "always")
    assert (made["render"], made["render_chosen"]) == ("always", True)
    assert made == api.get(connector_url(workspace, made["id"])).json()
    of_connector = ["--workspace", ws, "--connector", str(made["id"])]
    assert cli("connector", "show", *of_connector).output == (
        f"{made['id']}\twebcrawler connector\twebcrawler\t1 URL, render always\n"
    )
    update = ["connector", "update", *of_connector]
    # A chosen render stays through a change of mode; --default-render gives the mode's back.
    to_site = cli.json(*update, "--start-url", "https://e.com/")
    assert (to_site["mode"], to_site["render"], to_site["render_chosen"]) == ("site", "always", True)
    defaulted = cli.json(*update, "--default-render")
    assert (defaulted["render"], defaulted["render_chosen"]) == ("auto", False)
    assert defaulted == api.get(connector_url(workspace, made["id"])).json()
    assert cli(*update, "--render", "never").output == (
        f"{made['id']}\twebcrawler connector\twebcrawler\tsite crawl of https://e.com/, render never\n"
    )
    to_list = cli.json(*update, "--url", "https://e.com/a")
    assert (to_list["mode"], to_list["render"], to_list["render_chosen"]) == ("list", "never", True)
    refused = cli(*create, "--url", "https://e.com/", "--render", "js", ok=False)
    assert "'js' is not one of 'never', 'auto', 'always'" in refused.output
