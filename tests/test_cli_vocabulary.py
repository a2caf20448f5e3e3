"""One vocabulary: every option is spelled as the API field it sets (checked against the OpenAPI document), the
old spellings and positional ids still work with a notice naming the new shape, `-h` on every command and group,
and `--version`."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from pipelines_dagster.cli.main import main
from tests.test_cli import api, cli, connector, workspace  # noqa: F401  (fixtures)

WS = "/workspaces/{workspace_id}"
PIPELINE = f"{WS}/pipelines/{{pipeline_id}}"
ENDPOINT = f"{WS}/notifications/{{endpoint_id}}"
TRIGGER = f"{PIPELINE}/triggers/{{trigger_id}}"
# The command that sets or queries what an API operation takes, and that operation.
OPERATION_OF_COMMAND = {
    ("pipeline", "create"): ("post", f"{WS}/pipelines"),
    ("pipeline", "update"): ("patch|put", PIPELINE),
    ("pipeline", "run"): ("post", f"{PIPELINE}/run"),
    ("runs",): ("get", f"{PIPELINE}/runs"),
    ("connector", "create"): ("post", f"{WS}/connectors"),
    ("connector", "update"): ("patch", f"{WS}/connectors/{{connector_id}}"),
    ("trigger", "create"): ("post", f"{PIPELINE}/triggers"),
    ("trigger", "rotate-secret"): ("post", f"{TRIGGER}/rotate-secret"),
    ("event", "emit"): ("post", f"{WS}/events"),
    ("notification", "create"): ("post", f"{WS}/notifications"),
    ("notification", "rotate-secret"): ("post", f"{ENDPOINT}/rotate-secret"),
    ("notification", "deliveries"): ("get", f"{ENDPOINT}/deliveries"),
    ("notification", "redrive"): ("post", f"{ENDPOINT}/redrive"),
    ("costs",): ("get", f"{WS}/costs"),
}
# Options with no field of their own in the API, and why.
CLI_ONLY = {
    "--json": "prints JSON instead of text",
    "--url-file": "reads --url values from a file",
    "--wait": "follows the run the API launched",
    "--disabled": "enabled: false",
    "--no-folder": "folder: null",
    "--no-urls": "urls: null",
    "--no-schedule": "schedule: null",
    "--default-max-runtime": "max_runtime_seconds: null",
    "--default-queue": "worker_queue: null",
    "--default-render": "render: null",
    "--no-auth": "auth: null",
    "--default-user-agent": "user_agent: null",
}


def walk(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group under `group`, with its path of names."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from walk(command, click.Context(command, parent=ctx, info_name=name), (*path, name))


def every_command() -> list[tuple[tuple[str, ...], Any]]:
    return list(walk(main, click.Context(main, info_name="pipelines-dagster")))


def fields_of(document: dict[str, Any], method: str, path: str) -> set[str]:
    """The names an operation takes: path and query parameters, and its body's fields with those of the objects
    nested in it (a schedule's cron, a retry policy's max_retries, a site's start_urls), each also under its
    object's name (auth_basic), the spelling of a nested field whose own name says too little."""
    schemas = document["components"]["schemas"]
    operations = document["paths"][path]
    operation = next(operations[m] for m in method.split("|") if m in operations)
    names = {parameter["name"] for parameter in operation.get("parameters", [])}

    def add(schema: dict[str, Any], parent: str = "") -> None:
        for member in schema.get("anyOf", []):
            add(member, parent)
        if "$ref" in schema:
            add(schemas[schema["$ref"].rsplit("/", 1)[1]], parent)
        for name, field in schema.get("properties", {}).items():
            names.update({name, f"{parent}_{name}"} if parent else {name})
            add(field, name)

    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None:
        add(body)
    return names


def test_every_option_is_spelled_as_the_api_field_it_sets(api):
    document = api.get("/openapi.json").json()
    commands = dict(every_command())
    misspelled = []
    for names, (method, path) in OPERATION_OF_COMMAND.items():
        fields = fields_of(document, method, path)
        for param in commands[names].params:
            if not isinstance(param, click.Option) or param.hidden or param.opts[0] in {*CLI_ONLY, "--help"}:
                continue
            spelled = param.opts[0].removeprefix("--").replace("-", "_")
            # A list field is set by its singular repeated, an id by its noun; a flag pair by its field's name.
            spellings = {spelled, f"{spelled}s", f"{spelled}_id", f"{spelled}_ids"}
            if not spellings & fields and not (param.is_flag and param.name in fields):
                misspelled.append(f"{' '.join(names)} {param.opts[0]}: none of {sorted(fields)}")
    assert not misspelled, "\n".join(misspelled)


def test_h_is_help_on_every_command_and_group():
    runner = CliRunner()
    checked = 0
    for names, _command in [((), main), *every_command()]:
        short = runner.invoke(main, [*names, "-h"])
        assert short.exit_code == 0 and short.stdout.startswith("Usage: "), (names, short.output)
        assert short.stdout == runner.invoke(main, [*names, "--help"]).stdout, names
        checked += 1
    assert checked > 40


def test_version_prints_the_packages_version():
    installed = Path(sys.executable).parent / "pipelines-dagster"
    shown = subprocess.run([installed, "--version"], capture_output=True, text=True, check=True)
    assert shown.stdout == f"pipelines-dagster, version {importlib.metadata.version('pipelines-dagster')}\n"
    assert shown.stderr == ""


def notices(result: Any) -> list[str]:
    return result.stderr.splitlines()


def test_old_spellings_of_renamed_options_still_work_with_a_notice(cli, workspace, connector):
    ws, connector_id = str(workspace["id"]), str(connector["id"])
    new = ["--backoff", "linear", "--max-retries", "5", "--delay-seconds", "30", "--max-runtime-seconds", "600"]
    old = ["--retry-backoff", "linear", "--retry-max=5", "--retry-delay", "30", "--max-runtime", "600"]
    base = ["pipeline", "create", "--workspace", ws, "--connector", connector_id, "--json"]
    made_new = cli(*base, "--name", "new", *new)
    made_old = cli(*base, "--name", "old", *old)
    assert notices(made_new) == []
    assert notices(made_old) == [
        "--retry-backoff is deprecated: use --backoff",
        "--retry-max is deprecated: use --max-retries",
        "--retry-delay is deprecated: use --delay-seconds",
        "--max-runtime is deprecated: use --max-runtime-seconds",
    ]
    shown_new, shown_old = (cli.json_of(made) for made in (made_new, made_old))
    for field in ("retry_policy", "max_runtime_seconds"):
        assert shown_old[field] == shown_new[field]
    assert shown_new["retry_policy"]["max_retries"] == 5 and shown_new["max_runtime_seconds"] == 600

    update = ["pipeline", "update", "--workspace", ws, "--pipeline", str(shown_old["id"]), "--json"]
    updated = cli(*update, "--retry-max", "2", "--max-runtime", "900")
    assert notices(updated) == [
        "--retry-max is deprecated: use --max-retries",
        "--max-runtime is deprecated: use --max-runtime-seconds",
    ]
    assert (cli.json_of(updated)["retry_policy"]["max_retries"], cli.json_of(updated)["max_runtime_seconds"]) == (
        2,
        900,
    )
    # A bad value given under the old spelling is named by the new one.
    refused = cli(*update, "--retry-max", "11", ok=False)
    assert "Error: --max-retries: must be a whole number from 0 to 10" in refused.output

    site = cli("connector", "create", "--workspace", ws, "--type", "webcrawler", "--site", "https://e.com/", "--json")
    assert notices(site) == ["--site is deprecated: use --start-url"]
    assert cli.json_of(site)["site"]["start_urls"] == ["https://e.com/"]

    emitted = cli("event", "emit", "--workspace", ws, "--type", "refresh.requested", "--json")
    assert notices(emitted) == ["--type is deprecated: use --event-type"]
    assert cli.json_of(emitted)["event_type"] == "refresh.requested"

    endpoint = cli(
        *("notification", "create", "--workspace", ws, "--url", "https://93.184.215.14/hook", "--json"),
        *("--event", "credits.low", "--credits-below", "5000"),
    )
    assert notices(endpoint) == [
        "--event is deprecated: use --event-type",
        "--credits-below is deprecated: use --credits-below-micros",
    ]
    shown = cli.json_of(endpoint)
    assert (shown["event_types"], shown["credits_below_micros"]) == (["credits.low"], 5000)


def test_help_lists_only_the_new_spellings():
    runner = CliRunner()
    for names, renamed in [
        (["pipeline", "create"], ["--retry-backoff", "--retry-max", "--retry-delay", "--max-runtime "]),
        (["connector", "create"], ["--site "]),
        (["event", "emit"], ["--type"]),
        (["notification", "create"], ["--event ", "--credits-below "]),
    ]:
        shown = runner.invoke(main, [*names, "--help"]).stdout
        assert not [old for old in renamed if old in shown], names


def test_pipelines_and_endpoints_are_named_by_option_and_the_old_positional_id_still_works(cli, workspace, connector):
    ws = str(workspace["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "p")
    by_option = cli("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"]), "--json")
    by_position = cli("pipeline", "show", "--workspace", ws, str(made["id"]), "--json")
    assert cli.json_of(by_position) == cli.json_of(by_option) == made
    assert notices(by_option) == []
    assert notices(by_position) == [f"the pipeline id as an argument is deprecated: use --pipeline {made['id']}"]
    both = cli("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"]), str(made["id"]), ok=False)
    assert "give the pipeline once, as --pipeline" in both.output
    missing = cli("pipeline", "disable", "--workspace", ws, ok=False)
    assert "Missing option '--pipeline'" in missing.output
    assert cli.json("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"]))["enabled"] is True
    # The usage line names the option, not the old argument.
    shown_help = cli("pipeline", "show", "-h").output
    assert "Usage: main pipeline show [OPTIONS]\n" in shown_help
    [pipeline_option] = [line for line in shown_help.splitlines() if line.strip().startswith("--pipeline ")]
    assert pipeline_option.endswith("; required]")

    endpoint = cli.json(
        "notification", "create", "--workspace", ws, "--url", "https://93.184.215.14/hook", "--event-type", "run.failed"
    )
    shown = cli("notification", "show", "--workspace", ws, str(endpoint["id"]), "--json")
    assert notices(shown) == [f"the endpoint id as an argument is deprecated: use --endpoint {endpoint['id']}"]
    assert cli.json_of(shown) == cli.json("notification", "show", "--workspace", ws, "--endpoint", str(endpoint["id"]))


def test_trigger_show_and_delete(cli, workspace, connector, api):
    ws = str(workspace["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "p")
    of_pipeline = ["--workspace", ws, "--pipeline", str(made["id"])]
    event = cli.json("trigger", "create", *of_pipeline, "--kind", "event", "--event-type", "refresh.requested")
    triggers = f"/workspaces/{ws}/pipelines/{made['id']}/triggers"
    [listed] = [one for one in api.get(triggers).json()["triggers"] if one["id"] == event["id"]]
    assert cli.json("trigger", "show", *of_pipeline, "--trigger", str(event["id"])) == listed
    assert cli("trigger", "show", *of_pipeline, "--trigger", str(event["id"])).output.startswith(
        f"{event['id']}\tevent"
    )
    deleted = cli.json("trigger", "delete", *of_pipeline, "--trigger", str(event["id"]))
    assert deleted == {"id": event["id"], "deleted": True}
    assert event["id"] not in [one["id"] for one in api.get(triggers).json()["triggers"]]
    gone = cli("trigger", "show", *of_pipeline, "--trigger", str(event["id"]), ok=False)
    assert f"trigger {event['id']} is not a trigger of pipeline {made['id']}" in gone.output
    other = cli.json("workspace", "create", "--name", "Other", "--owner", "user-2")
    theirs = cli(
        "trigger", "delete", "--workspace", str(other["id"]), "--pipeline", str(made["id"]), "--trigger", "1", ok=False
    )
    assert f"pipeline {made['id']} is not in workspace {other['id']}" in theirs.output


@pytest.mark.parametrize("alias", ["-h", "--help"])
def test_help_through_the_console_script(alias):
    installed = Path(sys.executable).parent / "pipelines-dagster"
    shown = subprocess.run([installed, "connector", alias], capture_output=True, text=True, check=True)
    assert "Usage: pipelines-dagster connector [OPTIONS] COMMAND" in shown.stdout
    for command in ("create", "list", "show", "update", "delete"):
        assert f"\n  {command} " in shown.stdout
