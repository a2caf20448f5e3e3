"""Every CLI command, its JSON output (the API's answer for the same row), and its bad-input path (one-line
reason, nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy.orm import Session

from pipelines_dagster.api.app import create_app
from pipelines_dagster.api.schemas.common import DeletedOut
from pipelines_dagster.api.schemas.credits import CreditsGrantOut
from pipelines_dagster.api.schemas.database import DatabaseOut
from pipelines_dagster.api.schemas.templates import SeedOut, TemplateList
from pipelines_dagster.api.schemas.triggers import NewWebhookOut, RotatedOut
from pipelines_dagster.api.schemas.workspaces import NewWorkspaceOut
from pipelines_dagster.app_db.engine import create_engine, session_factory
from pipelines_dagster.app_db.models import Connector, Pipeline
from pipelines_dagster.cli.main import main
from pipelines_dagster.core.ledger.billing import Billing
from pipelines_dagster.settings import load_settings
from tests.support.db import row_counts


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    for name in ("PIPELINES_DATABASE_URL", "PIPELINES_BLOB_STORE", "PIPELINES_LOCKS"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def run(*args: str, ok: bool = True):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, result.output
        else:
            assert result.exit_code != 0, result.output
            # Our own errors are one line; click's usage errors add its usage hint above theirs.
            errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
            assert len(errors) == 1, result.output
        return result

    def run_json(*args: str) -> dict:
        return json.loads(run(*args, "--json").output)

    run.json = run_json
    # A result's JSON, when stderr has more to say (a deprecation notice).
    run.json_of = lambda result: json.loads(result.stdout)
    run.engine = lambda: create_engine(f"sqlite:///{tmp_path / 'data' / 'app.sqlite3'}")
    return run


@pytest.fixture
def workspace(cli) -> dict:
    cli("db", "upgrade")
    return cli.json("workspace", "create", "--name", "Acme", "--owner", "user-1")


@pytest.fixture
def api(cli, workspace, tmp_path) -> Iterator[TestClient]:
    """The HTTP API over the CLI's own app database and Dagster instance, called with the workspace's token."""
    import dagster as dg

    with (
        dg.DagsterInstance.from_config(str(tmp_path / "dagster-home")) as instance,
        TestClient(create_app(settings=load_settings(), instance=instance)) as client,
    ):
        client.headers["Authorization"] = f"Bearer {workspace['api_token']}"
        yield client


def as_model(model: type[BaseModel], shown: dict[str, Any]) -> dict[str, Any]:
    """`shown` read as `model` and printed again: equal to `shown` only when it holds exactly the model's fields."""
    return model.model_validate(shown).model_dump(mode="json")


def test_db_upgrade_creates_the_schema_and_is_repeatable(cli):
    first = cli.json("db", "upgrade")
    assert first["status"] == "current"
    cli("db", "upgrade")
    assert row_counts(cli.engine())["workspaces"] == 0


def test_db_upgrade_names_a_bad_database_url(cli, monkeypatch):
    monkeypatch.setenv("PIPELINES_DATABASE_URL", "mysql://x@localhost/db")
    result = cli("db", "upgrade", ok=False)
    assert "PIPELINES_DATABASE_URL" in result.output


def test_commands_before_upgrade_say_to_run_it(cli):
    result = cli("workspace", "create", "--name", "a", "--owner", "u", ok=False)
    assert "pipelines-dagster db upgrade" in result.output


def test_workspace_create_prints_a_token_that_is_stored_only_hashed(cli, workspace):
    assert set(workspace) >= {"id", "name", "api_token"} and workspace["name"] == "Acme"
    with cli.engine().connect() as conn:
        stored = conn.execute(sa.text("SELECT token_hash FROM api_tokens")).scalars().all()
    assert len(stored) == 1 and workspace["api_token"] not in stored[0]
    text = cli("workspace", "create", "--name", "Other", "--owner", "user-2").output
    assert "API token" in text and "pdk_" in text


def test_workspace_create_rejects_a_blank_name(cli, workspace):
    before = row_counts(cli.engine())
    result = cli("workspace", "create", "--name", "  ", "--owner", "u", ok=False)
    assert "--name" in result.output
    assert row_counts(cli.engine()) == before


def test_connector_create_with_urls_and_with_a_url_file(cli, workspace, tmp_path):
    ws = str(workspace["id"])
    made = cli.json(
        "connector",
        "create",
        "--workspace",
        ws,
        "--type",
        "webcrawler",
        "--url",
        "https://example.com/a",
        "--url",
        "https://example.com/b",
    )
    assert made["urls"] == ["https://example.com/a", "https://example.com/b"]
    url_file = tmp_path / "urls.txt"
    url_file.write_text("# docs\nhttps://example.org/one\n\nhttps://example.org/two\nhttps://example.org/one\n")
    from_file = cli.json("connector", "create", "--workspace", ws, "--type", "webcrawler", "--url-file", str(url_file))
    assert from_file["urls"] == ["https://example.org/one", "https://example.org/two"]
    assert from_file["id"] != made["id"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ["--workspace", "999", "--type", "webcrawler", "--url", "https://example.com"],
            "workspace 999 does not exist",
        ),
        (["--type", "webcrawler", "--url", "https://example.com", "--url", "example.com/no-scheme"], "malformed URL"),
        (["--type", "webcrawler", "--url", "ftp://example.com/file"], "http:// or https://"),
        (["--type", "webcrawler"], "at least one URL"),
        (["--type", "webcrawler", "--url", "https://user:pw@example.com"], "credentials"),
        (["--type", "google_drive", "--url", "https://example.com"], "takes no URLs"),
        (["--type", "gopher", "--url", "https://example.com"], "Invalid value for '--type'"),
    ],
)
def test_connector_create_bad_input_writes_nothing(cli, workspace, args, reason):
    if "--workspace" not in args:
        args = ["--workspace", str(workspace["id"]), *args]
    before = row_counts(cli.engine())
    result = cli("connector", "create", *args, ok=False)
    assert reason in result.output
    assert row_counts(cli.engine()) == before


@pytest.fixture
def connector(cli, workspace) -> dict:
    return cli.json(
        "connector",
        "create",
        "--workspace",
        str(workspace["id"]),
        "--type",
        "webcrawler",
        "--url",
        "https://example.com/",
    )


def test_pipeline_create_with_folder_and_cron_schedule(cli, workspace, connector):
    made = cli.json(
        "pipeline",
        "create",
        "--workspace",
        str(workspace["id"]),
        "--connector",
        str(connector["id"]),
        "--name",
        "Docs nightly",
        "--folder",
        "Docs",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "Europe/Stockholm",
    )
    assert made["save_to_kb"] is True and made["enabled"] is True
    # 02:30 in Stockholm is 01:30 UTC in winter (CET, UTC+1).
    assert made["schedule"]["next_fire_at"].endswith("T01:30:00Z")
    with cli.engine().connect() as conn:
        folder = conn.execute(sa.text("SELECT id, name FROM folders WHERE id = :id"), {"id": made["folder_id"]}).one()
        trigger = conn.execute(
            sa.text(
                "SELECT kind, cron, timezone, interval_minutes FROM pipeline_triggers "
                "WHERE pipeline_id = :id AND kind = 'schedule'"
            ),
            {"id": made["id"]},
        ).one()
    assert tuple(folder) == (made["folder_id"], "Docs")
    assert tuple(trigger) == ("schedule", "30 2 * * *", "Europe/Stockholm", None)


def test_pipeline_create_interval_no_kb_disabled(cli, workspace, connector):
    made = cli.json(
        "pipeline",
        "create",
        "--workspace",
        str(workspace["id"]),
        "--connector",
        str(connector["id"]),
        "--name",
        "raw",
        "--no-save-to-kb",
        "--every-minutes",
        "15",
        "--disabled",
    )
    assert (made["save_to_kb"], made["enabled"], made["folder_id"]) == (False, False, None)
    plain = cli.json(
        "pipeline",
        "create",
        "--workspace",
        str(workspace["id"]),
        "--connector",
        str(connector["id"]),
        "--name",
        "manual only",
    )
    assert plain["schedule"] is None
    assert plain["retry_policy"]["backoff"] == "exponential" and plain["retry_policy"]["max_retries"] == 3


def test_a_pipelines_max_runtime_is_set_changed_and_given_back_to_the_deployment(cli, workspace, connector):
    ws = str(workspace["id"])
    args = ["--workspace", ws, "--connector", str(connector["id"])]
    made = cli.json("pipeline", "create", *args, "--name", "long", "--max-runtime-seconds", "14400")
    assert made["max_runtime_seconds"] == 14400
    assert cli.json("pipeline", "create", *args, "--name", "plain")["max_runtime_seconds"] is None
    changed = cli.json(
        "pipeline", "update", "--workspace", ws, "--pipeline", str(made["id"]), "--max-runtime-seconds", "600"
    )
    assert changed["max_runtime_seconds"] == 600
    renamed = cli.json("pipeline", "update", "--workspace", ws, "--pipeline", str(made["id"]), "--name", "longer")
    assert renamed["max_runtime_seconds"] == 600
    reset = cli.json("pipeline", "update", "--workspace", ws, "--pipeline", str(made["id"]), "--default-max-runtime")
    assert reset["max_runtime_seconds"] is None


def test_a_pipelines_worker_queue_is_set_shown_changed_and_given_back_to_the_default(cli, workspace, connector):
    ws = str(workspace["id"])
    args = ["--workspace", ws, "--connector", str(connector["id"])]
    made = cli.json("pipeline", "create", *args, "--name", "site", "--queue", "site-crawls")
    assert made["worker_queue"] == "site-crawls"
    assert cli.json("pipeline", "create", *args, "--name", "plain")["worker_queue"] is None
    refused = cli("pipeline", "create", *args, "--name", "bad", "--queue", "a,b", ok=False)
    assert "--worker-queue: 'a,b' is not a queue name" in refused.output
    update = ["pipeline", "update", "--workspace", ws, "--pipeline", str(made["id"])]
    assert cli.json(*update, "--name", "whole site")["worker_queue"] == "site-crawls"
    assert cli.json(*update, "--worker-queue", "bulk")["worker_queue"] == "bulk"
    listed = [line.split("\t") for line in cli("pipeline", "list", "--workspace", ws).output.splitlines()]
    assert [name for _, name, state, _ in listed if state.endswith(", on queue bulk")] == ["whole site"]
    shown = cli("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"])).output
    assert ", on queue bulk\t" in shown
    reset = cli.json(*update, "--default-queue")
    assert reset["worker_queue"] is None
    assert "on queue" not in cli("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"])).output


def test_pipeline_create_with_a_linear_retry_policy(cli, workspace, connector):
    made = cli.json(
        "pipeline",
        "create",
        "--workspace",
        str(workspace["id"]),
        "--connector",
        str(connector["id"]),
        "--name",
        "patient",
        "--backoff",
        "linear",
        "--max-retries",
        "5",
        "--delay-seconds",
        "30",
    )
    assert made["retry_policy"]["description"] == "linear backoff, up to 5 retries, waiting 30, 60, 90, 120, ... s"
    with cli.engine().connect() as conn:
        stored = conn.execute(
            sa.text("SELECT retry_backoff, retry_max, retry_delay_seconds FROM pipelines WHERE id = :id"),
            {"id": made["id"]},
        ).one()
    assert tuple(stored) == ("linear", 5, 30.0)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--cron", "0 6 * *", "--timezone", "UTC"], "invalid cron expression"),
        (["--cron", "0 6 * * *", "--timezone", "Mars/Olympus"], "unknown timezone"),
        (["--cron", "0 0 30 2 *", "--timezone", "UTC"], "--cron: cron expression '0 0 30 2 *' never fires"),
        (["--cron", "0 6 * * *", "--timezone", "localtime"], "--timezone: unknown timezone 'localtime'"),
        (["--cron", "0 6 * * *", "--timezone", "../../../etc/localtime"], "--timezone: unknown timezone"),
        (["--cron", "0 6 * * *"], "needs a timezone"),
        (["--cron", "0 6 * * *", "--timezone", "UTC", "--every-minutes", "5"], "not both"),
        (["--every-minutes", "0"], "1 or more"),
        (["--every-minutes", "1000000000000"], "--every-minutes: must be a whole number of minutes"),
        (["--connector", "424242"], "connector 424242 is not in workspace"),
        (["--folder", ""], "--folder"),
        (["--backoff", "fibonacci"], "--backoff: unknown backoff 'fibonacci'"),
        (["--max-retries", "-1"], "--max-retries"),
        (["--delay-seconds", "0"], "--delay-seconds: must be from 1 to 3600 seconds"),
        (["--delay-seconds", "1e-300"], "--delay-seconds: must be from 1 to 3600 seconds"),
        (["--delay-seconds", "-3"], "--delay-seconds"),
        (["--max-runtime-seconds", "5"], "--max-runtime-seconds: must be a whole number of seconds from 10 to 604800"),
        (["--max-runtime-seconds", "1h"], "--max-runtime-seconds"),
    ],
)
def test_pipeline_create_bad_input_writes_nothing(cli, workspace, connector, extra, reason):
    args = ["--workspace", str(workspace["id"]), "--name", "p", "--folder", "New folder"]
    if "--connector" not in extra:
        args += ["--connector", str(connector["id"])]
    before = row_counts(cli.engine())
    result = cli("pipeline", "create", *args, *extra, ok=False)
    assert reason in result.output
    assert row_counts(cli.engine()) == before


@pytest.mark.parametrize(
    "args",
    [
        ["pipeline", "show", "--workspace", str(10**20), "--pipeline", "1"],
        ["pipeline", "show", "--workspace", "1", "--pipeline", str(2**63)],
        ["pipeline", "create", "--workspace", "1", "--connector", "0", "--name", "p"],
        ["costs", "--workspace", "1", "--pipeline", str(10**30)],
    ],
)
def test_an_id_no_row_can_have_is_refused_in_one_line(cli, workspace, args):
    result = cli(*args, ok=False)
    assert "is not in the range 1<=x<=9007199254740991" in result.output


def test_pipeline_create_refuses_another_workspaces_connector_and_a_duplicate_name(cli, workspace, connector):
    other = cli.json("workspace", "create", "--name", "Other", "--owner", "user-2")
    before = row_counts(cli.engine())
    result = cli(
        "pipeline",
        "create",
        "--workspace",
        str(other["id"]),
        "--connector",
        str(connector["id"]),
        "--name",
        "steal",
        ok=False,
    )
    assert f"not in workspace {other['id']}" in result.output
    args = [
        "pipeline",
        "create",
        "--workspace",
        str(workspace["id"]),
        "--connector",
        str(connector["id"]),
        "--name",
        "p",
    ]
    cli(*args)
    assert "already has a pipeline named" in cli(*args, "--folder", "X", ok=False).output
    assert row_counts(cli.engine())["pipelines"] == before["pipelines"] + 1
    assert row_counts(cli.engine())["folders"] == before["folders"]


def test_credits_grant_adds_to_the_balance(cli, workspace):
    ws = str(workspace["id"])
    assert cli.json("credits", "grant", "--workspace", ws, "--micros", "5000")["balance_micros"] == 5000
    assert cli.json("credits", "grant", "--workspace", ws, "--micros", "2500")["balance_micros"] == 7500


def test_credits_show_balance_held_and_available(cli, workspace, monkeypatch):
    monkeypatch.setenv("PIPELINES_BILLING_ENABLED", "true")
    ws = workspace["id"]
    cli("credits", "grant", "--workspace", str(ws), "--micros", "5000")
    billing = Billing(session_factory(cli.engine()), enabled=True, micros_per_crawl=1000)
    billing.reserve(ws, 2, idempotency_key=f"run:{ws}", run_id="run")
    shown = cli.json("credits", "show", "--workspace", str(ws))
    assert (shown["balance_micros"], shown["held_micros"], shown["available_micros"]) == (5000, 2000, 3000)
    assert shown["billing_enabled"] is True
    text = cli("credits", "show", "--workspace", str(ws)).output
    assert "5000 micros balance, 2000 held by crawls under way, 3000 available" in text
    monkeypatch.setenv("PIPELINES_BILLING_ENABLED", "false")
    assert "billing is off" in cli("credits", "show", "--workspace", str(ws)).output
    assert "workspace 77 does not exist" in cli("credits", "show", "--workspace", "77", ok=False).output


def test_credits_grant_bad_input(cli, workspace):
    before = row_counts(cli.engine())
    assert (
        "workspace 77 does not exist" in cli("credits", "grant", "--workspace", "77", "--micros", "5", ok=False).output
    )
    result = CliRunner().invoke(main, ["credits", "grant", "--workspace", str(workspace["id"]), "--micros", "-5"])
    assert result.exit_code != 0 and "--micros" in result.output
    assert row_counts(cli.engine()) == before


def test_console_script_runs_against_postgres(postgres_url, tmp_path):
    """The installed entry point, as an operator runs it, on the production database."""
    env = {**os.environ, "PIPELINES_DATABASE_URL": postgres_url, "PIPELINES_DATA_DIR": str(tmp_path)}
    script = Path(sys.executable).with_name("pipelines-dagster")
    out = subprocess.run(
        [script, "workspace", "create", "--name", "PG", "--owner", "u", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    created = json.loads(out.stdout)
    bad = subprocess.run(
        [script, "credits", "grant", "--workspace", str(created["id"]), "--micros", "abc"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "--micros" in bad.stderr


def dagster_partitions(tmp_path) -> list[str]:
    """The `pipelines` partitions of the CLI's Dagster instance."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster-home")) as instance:
        return list(instance.get_dynamic_partitions("pipelines"))


def partitions(tmp_path) -> list[str]:
    """The pipelines' partitions, but the seeded templates' (test_templates.py follows those)."""
    templates = template_pipelines(tmp_path)
    return [key for key in dagster_partitions(tmp_path) if key not in templates]


def template_pipelines(tmp_path) -> set[str]:
    from pipelines_dagster.core.catalog.templates import template_key

    engine = create_engine(f"sqlite:///{tmp_path / 'data' / 'app.sqlite3'}")
    try:
        with Session(engine) as session:
            return {str(pipeline.id) for pipeline in session.scalars(sa.select(Pipeline)) if template_key(pipeline)}
    finally:
        engine.dispose()


def test_pipeline_partitions_follow_create_and_delete(cli, workspace, connector, tmp_path):
    ws = str(workspace["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "p")
    assert partitions(tmp_path) == [made["partition_key"]] == [f"{made['id']}-p"]
    assert cli.json("pipeline", "delete", "--workspace", ws, "--pipeline", str(made["id"]))["deleted"] is True
    assert partitions(tmp_path) == []
    assert row_counts(cli.engine())["pipelines"] == len(template_pipelines(tmp_path))


def test_pipeline_commands_refuse_another_workspaces_pipeline(cli, workspace, connector, tmp_path):
    made = cli.json(
        "pipeline", "create", "--workspace", str(workspace["id"]), "--connector", str(connector["id"]), "--name", "p"
    )
    other = cli.json("workspace", "create", "--name", "Other", "--owner", "user-2")
    for command in ("enable", "disable", "delete"):
        result = cli("pipeline", command, "--workspace", str(other["id"]), "--pipeline", str(made["id"]), ok=False)
        assert f"pipeline {made['id']} is not in workspace {other['id']}" in result.output
    assert partitions(tmp_path) == [made["partition_key"]]


def own_indexing_connector(cli, ws: str) -> tuple[dict, int]:
    """A web connector with its own periodic indexing, and the id of that (system-managed) pipeline."""
    command = f"connector create --workspace {ws} --type webcrawler --url https://example.com/ --index-every-minutes 60"
    made = cli.json(*command.split())
    [own] = [
        pipeline["id"]
        for pipeline in cli.json("pipeline", "list", "--workspace", ws)["pipelines"]
        if pipeline["system_managed"] and pipeline["connector_id"] == made["id"]
    ]
    return made, own


def test_dedup_guard_through_the_cli(cli, workspace, tmp_path):
    ws = str(workspace["id"])
    own, own_pipeline = own_indexing_connector(cli, ws)
    assert own["periodic_indexing_enabled"] is True
    shown = cli.json("pipeline", "show", "--workspace", ws, "--pipeline", str(own_pipeline))
    assert partitions(tmp_path) == [shown["partition_key"]]

    def schedule_enabled() -> bool:
        with cli.engine().connect() as conn:
            return bool(
                conn.execute(
                    sa.text(
                        "SELECT t.enabled FROM pipeline_triggers t JOIN pipelines p ON p.id = t.pipeline_id "
                        "WHERE p.system_managed AND p.connector_id = :c AND t.kind = 'schedule'"
                    ),
                    {"c": own["id"]},
                ).scalar_one()
            )

    user = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(own["id"]), "--name", "mine")
    assert not schedule_enabled()
    cli("pipeline", "disable", "--workspace", ws, "--pipeline", str(user["id"]))
    assert schedule_enabled()
    cli("pipeline", "enable", "--workspace", ws, "--pipeline", str(user["id"]))
    assert not schedule_enabled()
    cli("pipeline", "delete", "--workspace", ws, "--pipeline", str(user["id"]))
    assert schedule_enabled()


def test_connector_index_interval_must_be_positive(cli, workspace):
    before = row_counts(cli.engine())
    result = cli(
        "connector",
        "create",
        "--workspace",
        str(workspace["id"]),
        "--type",
        "webcrawler",
        "--url",
        "https://example.com/",
        "--index-every-minutes",
        "0",
        ok=False,
    )
    assert "--index-every-minutes" in result.output
    assert row_counts(cli.engine()) == before


def test_trigger_create_webhook_and_event(cli, workspace, connector):
    ws = str(workspace["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "p")
    hook = cli.json("trigger", "create", "--workspace", ws, "--pipeline", str(made["id"]), "--kind", "webhook")
    assert hook["signing"] == "standard" and hook["secret"].startswith("whsec_")
    rotated = cli.json(
        "trigger",
        "rotate-secret",
        "--workspace",
        ws,
        "--pipeline",
        str(made["id"]),
        "--trigger",
        str(hook["id"]),
        "--overlap-seconds",
        "60",
    )
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != hook["secret"]
    other = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "gh")
    github = cli.json(
        "trigger",
        "create",
        "--workspace",
        ws,
        "--pipeline",
        str(other["id"]),
        "--kind",
        "webhook",
        "--signing",
        "github",
    )
    assert github["signing"] == "github" and github["webhook_path"] == f"/webhooks/{github['secret']}"
    sub = cli.json(
        "trigger",
        "create",
        "--workspace",
        ws,
        "--pipeline",
        str(made["id"]),
        "--kind",
        "event",
        "--event-type",
        "document.uploaded",
    )
    assert sub["event_type"] == "document.uploaded"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--kind", "event", "--event-type", "page.updated"], "unknown event type 'page.updated'"),
        (["--kind", "event"], "--event-type"),
        (["--kind", "webhook", "--event-type", "folder.changed"], "--event-type"),
        (["--kind", "webhook", "--signing", "svix"], "unknown signing mode 'svix'"),
        (["--kind", "event", "--event-type", "folder.changed", "--signing", "github"], "--signing"),
    ],
)
def test_trigger_create_bad_input_writes_nothing(cli, workspace, connector, extra, reason):
    ws = str(workspace["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "p")
    before = row_counts(cli.engine())
    result = cli("trigger", "create", "--workspace", ws, "--pipeline", str(made["id"]), *extra, ok=False)
    assert reason in result.output
    assert row_counts(cli.engine()) == before


def test_event_emit_and_its_bad_input(cli, workspace):
    ws = str(workspace["id"])
    recorded = cli.json(
        "event", "emit", "--workspace", ws, "--event-type", "refresh.requested", "--payload", '{"reason": "stale"}'
    )
    assert recorded["event_type"] == "refresh.requested"
    before = row_counts(cli.engine())
    assert "unknown event type" in cli("event", "emit", "--workspace", ws, "--event-type", "x.y", ok=False).output
    assert (
        "--payload"
        in cli(
            "event", "emit", "--workspace", ws, "--event-type", "refresh.requested", "--payload", "[1]", ok=False
        ).output
    )
    assert (
        "does not exist"
        in cli("event", "emit", "--workspace", "999", "--event-type", "refresh.requested", ok=False).output
    )
    assert row_counts(cli.engine()) == before


def api_fields(model) -> set[str]:
    return set(model.model_fields)


def test_pipeline_update_show_and_list_answer_with_the_apis_fields(cli, workspace, connector):
    from pipelines_dagster.api.schemas.pipelines import PipelineList, PipelineOut, ScheduleOut

    ws = str(workspace["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "p")
    updated = cli.json(
        "pipeline",
        "update",
        "--workspace",
        ws,
        "--pipeline",
        str(made["id"]),
        "--name",
        "docs",
        "--folder",
        "Docs",
        "--url",
        "https://example.com/a",
        "--url",
        "https://example.com/b",
        "--every-minutes",
        "15",
        "--backoff",
        "linear",
        "--disable",
    )
    assert set(updated) == api_fields(PipelineOut) and set(updated["schedule"]) == api_fields(ScheduleOut)
    assert (updated["name"], updated["enabled"], updated["urls"]) == (
        "docs",
        False,
        ["https://example.com/a", "https://example.com/b"],
    )
    assert updated["schedule"]["every_minutes"] == 15 and updated["folder_id"] is not None
    assert updated["retry_policy"] == {
        "backoff": "linear",
        "max_retries": 3,
        "delay_seconds": 2.0,
        "description": "linear backoff, up to 3 retries, waiting 2, 4, 6 s",
    }
    shown = cli.json("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"]))
    assert shown == updated
    listed = cli.json("pipeline", "list", "--workspace", ws)
    assert set(listed) == api_fields(PipelineList)
    assert [pipeline for pipeline in listed["pipelines"] if pipeline["template"] is None] == [shown]
    assert "docs" in cli("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"])).output

    # Only what is given changes; the --no- flags clear.
    cleared = cli.json(
        "pipeline",
        "update",
        "--workspace",
        ws,
        "--pipeline",
        str(made["id"]),
        "--no-folder",
        "--no-urls",
        "--no-schedule",
        "--enable",
    )
    assert (cleared["folder_id"], cleared["urls"], cleared["schedule"], cleared["enabled"]) == (None, None, None, True)
    assert cleared["disabled_reason"] is None and updated["disabled_reason"].startswith("switched off")
    # Disabled, it is no partition a Dagster user can pick; enabled, its key is its id and the name it was created
    # with: the rename to "docs" left it.
    assert (updated["partition_key"], cleared["partition_key"]) == (None, f"{made['id']}-p")
    changed = {"folder_id", "urls", "schedule", "enabled", "disabled_reason", "updated_at", "partition_key"}
    assert {k: v for k, v in cleared.items() if k not in changed} == {
        k: v for k, v in updated.items() if k not in changed
    }
    with cli.engine().connect() as conn:
        triggers = sa.text("SELECT kind FROM pipeline_triggers WHERE pipeline_id = :id")
        assert conn.execute(triggers, {"id": made["id"]}).scalars().all() == ["manual"]


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--name", " "], "--name: must not be empty"),
        (["--cron", "0 6 * *", "--timezone", "UTC"], "--cron: invalid cron expression"),
        (["--cron", "0 6 * * *"], "--timezone: a cron schedule needs a timezone"),
        (["--every-minutes", "5", "--no-schedule"], "--no-schedule: give --cron, --timezone, --every-minutes or"),
        (["--folder", "X", "--no-folder"], "--no-folder: give --folder or --folder-id or --no-folder, not both"),
        (["--folder", "X", "--folder-id", "1"], "--folder-id: give folder (a name) or folder_id, not both"),
        (["--folder-id", "4242"], "--folder-id: folder 4242 is not in workspace"),
        (["--url", "https://example.com/", "--no-urls"], "--no-urls"),
        (["--url", "ftp://example.com/"], "--url"),
        (["--max-retries", "11"], "--max-retries: must be a whole number from 0 to 10"),
        (["--backoff", "fibonacci"], "--backoff: unknown backoff"),
        (
            ["--max-runtime-seconds", "700000"],
            "--max-runtime-seconds: must be a whole number of seconds from 10 to 604800",
        ),
        (
            ["--max-runtime-seconds", "60", "--default-max-runtime"],
            "--default-max-runtime: give --max-runtime-seconds or",
        ),
        (["--queue", "amq.direct"], "--worker-queue: 'amq.direct': names starting with 'amq.' are RabbitMQ's own"),
        (["--queue", "bulk", "--default-queue"], "--default-queue: give --worker-queue (--queue) or --default-queue"),
    ],
)
def test_pipeline_update_bad_input_names_the_option_and_writes_nothing(cli, workspace, connector, extra, reason):
    ws = str(workspace["id"])
    made = cli.json(
        "pipeline",
        "create",
        "--workspace",
        ws,
        "--connector",
        str(connector["id"]),
        "--name",
        "p",
        "--every-minutes",
        "30",
    )
    before, shown = (
        row_counts(cli.engine()),
        cli.json("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"])),
    )
    result = cli(
        "pipeline", "update", "--workspace", ws, "--pipeline", str(made["id"]), "--no-save-to-kb", *extra, ok=False
    )
    assert reason in result.output
    assert row_counts(cli.engine()) == before
    assert cli.json("pipeline", "show", "--workspace", ws, "--pipeline", str(made["id"])) == shown


def test_pipeline_edits_refuse_the_connectors_own_indexing(cli, workspace):
    ws = str(workspace["id"])
    _, system_id = own_indexing_connector(cli, ws)
    before = row_counts(cli.engine())
    for command in (["update", "--name", "mine"], ["disable"], ["delete"]):
        result = cli("pipeline", command[0], "--workspace", ws, "--pipeline", str(system_id), *command[1:], ok=False)
        assert "periodic indexing" in result.output
    assert row_counts(cli.engine()) == before
    assert cli.json("pipeline", "show", "--workspace", ws, "--pipeline", str(system_id))["system_managed"] is True


def test_runs_lists_a_pipelines_runs_as_the_api_does(cli, workspace, connector, tmp_path, api):
    import dagster as dg

    from pipelines_dagster.history import PipelineRunView, RunPage
    from pipelines_dagster.runs import run_tags

    ws = workspace["id"]
    made = cli.json("pipeline", "create", "--workspace", str(ws), "--connector", str(connector["id"]), "--name", "p")

    @dg.asset
    def noop() -> None:
        pass

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster-home")) as instance:
        run_ids = [
            dg.materialize(
                [noop], instance=instance, tags=run_tags(pipeline_id=made["id"], workspace_id=ws, trigger="manual")
            ).run_id
            for _ in range(2)
        ]
    first = cli.json("runs", "--workspace", str(ws), "--pipeline", str(made["id"]), "--limit", "1")
    assert set(first) == set(RunPage.model_fields) and set(first["runs"][0]) == set(PipelineRunView.model_fields)
    assert first == api.get(f"/workspaces/{ws}/pipelines/{made['id']}/runs", params={"limit": 1}).json()
    assert [run["run_id"] for run in first["runs"]] == [run_ids[1]] and first["runs"][0]["status"] == "succeeded"
    rest = cli.json("runs", "--workspace", str(ws), "--pipeline", str(made["id"]), "--cursor", first["next_cursor"])
    assert [run["run_id"] for run in rest["runs"]] == [run_ids[0]] and rest["next_cursor"] is None
    assert run_ids[0] in cli("runs", "--workspace", str(ws), "--pipeline", str(made["id"])).output

    other = cli.json("workspace", "create", "--name", "Other", "--owner", "user-2")
    refused = cli("runs", "--workspace", str(other["id"]), "--pipeline", str(made["id"]), ok=False)
    assert f"pipeline {made['id']} is not in workspace {other['id']}" in refused.output
    assert (
        "--limit" in cli("runs", "--workspace", str(ws), "--pipeline", str(made["id"]), "--limit", "0", ok=False).output
    )


def connector_count(cli) -> int:
    with Session(cli.engine()) as session:
        return session.scalar(sa.select(sa.func.count()).select_from(Connector)) or 0


def test_a_site_connector_is_created_with_its_bounds(cli, workspace):
    ws = str(workspace["id"])
    site = (
        "--start-url https://docs.example.com/ --max-depth 2 --max-pages 300 --include /docs/** --exclude /docs/old/*"
    )
    bounds = "--subdomains --drop-query-params utm_source"
    created = cli.json(*f"connector create --workspace {ws} --type webcrawler {site} {bounds}".split())
    assert created["mode"] == "site" and created["urls"] is None
    assert created["site"] == {
        "start_urls": ["https://docs.example.com/"],
        "max_depth": 2,
        "max_pages": 300,
        "include": ["/docs/**"],
        "exclude": ["/docs/old/*"],
        "subdomains": True,
        "drop_query_params": ["utm_source"],
    }
    listed = cli.json(*f"connector create --workspace {ws} --type webcrawler --url https://e.com/".split())
    assert (listed["mode"], listed["site"]) == ("list", None)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ("--start-url https://e.com/ --include docs/*", "--include"),
        ("--start-url https://e.com/ --max-depth -1", "--max-depth"),
        ("--start-url https://e.com/ --max-pages 101", "--max-pages"),
        ("--start-url https://e.com/ --drop-query-params a,all", "--drop-query-params"),
        ("--mode site", "--start-url"),
        ("--url https://e.com/ --max-depth 0", "--max-depth"),
        ("--url https://e.com/ --start-url https://e.com/", "--start-url"),
        ("--mode spider --start-url https://e.com/", "--mode"),
    ],
)
def test_bad_site_crawl_input_is_refused_naming_the_field_and_writes_nothing(
    cli, workspace, monkeypatch, arguments, field
):
    monkeypatch.setenv("PIPELINES_SITE_MAX_PAGES_CAP", "100")
    before = connector_count(cli)
    result = cli(*f"connector create --workspace {workspace['id']} --type webcrawler {arguments}".split(), ok=False)
    assert field in result.output
    assert connector_count(cli) == before


def test_a_new_workspaces_templates_are_listed_disabled_and_turned_on_from_the_cli(cli, workspace, connector, tmp_path):
    from pipelines_dagster.core.catalog.seeding import SCHEDULE_OFF_REASON
    from pipelines_dagster.core.catalog.templates import TEMPLATES

    ws = str(workspace["id"])
    catalog = cli.json("templates", "list")["templates"]
    assert [entry["key"] for entry in catalog] == [template.key for template in TEMPLATES]
    # No template's kind of site asks for other than its crawl mode's render default.
    assert {(entry["mode"], entry["render"]) for entry in catalog} == {("list", "never"), ("site", "auto")}
    assert "(site crawl, render auto, into the KB" in cli("templates", "list").output
    listed = cli.json("pipeline", "list", "--workspace", ws)["pipelines"]
    seeded = {pipeline["template"]: pipeline for pipeline in listed if pipeline["template"]}
    assert set(seeded) == {template.key for template in TEMPLATES}
    assert not any(pipeline["enabled"] for pipeline in seeded.values())
    watch = seeded["change_watch"]
    assert (
        "disabled (a built-in template (change_watch)"
        in cli("pipeline", "show", "--workspace", ws, "--pipeline", str(watch["id"])).output
    )
    # A template cannot run yet (no connector, disabled): it is no partition a Dagster user could pick.
    assert not {key.split("-")[0] for key in dagster_partitions(tmp_path)} & {str(p["id"]) for p in seeded.values()}
    assert all(p["partition_key"] is None for p in seeded.values())
    assert (
        "no partition (cannot run)" in cli("pipeline", "show", "--workspace", ws, "--pipeline", str(watch["id"])).output
    )

    triggers = cli.json("trigger", "list", "--workspace", ws, "--pipeline", str(watch["id"]))["triggers"]
    [schedule] = [trigger for trigger in triggers if trigger["kind"] == "schedule"]
    assert (schedule["enabled"], schedule["disabled_reason"]) == (False, SCHEDULE_OFF_REASON)
    assert (
        f"{schedule['id']}\tschedule\tevery 60 min\toff (seeded off"
        in cli("trigger", "list", "--workspace", ws, "--pipeline", str(watch["id"])).output
    )

    refused = cli("pipeline", "enable", "--workspace", ws, "--pipeline", str(watch["id"]), ok=False).output
    assert "enabled" in refused and "give it a connector_id or urls" in refused
    on = cli.json(
        "pipeline",
        "update",
        "--workspace",
        ws,
        "--pipeline",
        str(watch["id"]),
        "--connector",
        str(connector["id"]),
        "--enable",
    )
    assert (on["connector_id"], on["enabled"], on["disabled_reason"]) == (connector["id"], True, None)
    # Given a connector and enabled, it joins the partitions, under its id and name; disabled, it leaves them; back
    # again, under the same key.
    key = f"{watch['id']}-hourly-change-watch"
    assert (on["partition_key"], key in dagster_partitions(tmp_path)) == (key, True)
    assert f"partition {key}" in cli("pipeline", "show", "--workspace", ws, "--pipeline", str(watch["id"])).output
    assert cli.json("pipeline", "disable", "--workspace", ws, "--pipeline", str(watch["id"]))["partition_key"] is None
    assert key not in dagster_partitions(tmp_path)
    assert cli.json("pipeline", "enable", "--workspace", ws, "--pipeline", str(watch["id"]))["partition_key"] == key
    assert key in dagster_partitions(tmp_path)
    enabled = cli.json(
        "trigger", "enable", "--workspace", ws, "--pipeline", str(watch["id"]), "--trigger", str(schedule["id"])
    )
    assert enabled["enabled"] is True and enabled["next_fire_at"] is not None
    missing = cli(
        "trigger", "disable", "--workspace", ws, "--pipeline", str(watch["id"]), "--trigger", "9999", ok=False
    )
    assert f"trigger 9999 is not a trigger of pipeline {watch['id']}" in missing.output

    reseeded = cli.json("templates", "seed", "--workspace", ws)
    assert reseeded["workspaces"] == [
        {"workspace_id": workspace["id"], "created": [], "kept": sorted(p["id"] for p in seeded.values())}
    ]
    assert reseeded["retention_schedule"] == {"name": "maintenance_daily", "restarted": False}
    after = cli.json("trigger", "list", "--workspace", ws, "--pipeline", str(watch["id"]))["triggers"]
    assert next(t for t in after if t["kind"] == "schedule")["enabled"] is True
    assert cli.json("pipeline", "show", "--workspace", ws, "--pipeline", str(watch["id"]))["enabled"] is True


def test_the_run_now_command_and_its_launch_start_without_loading_dagster():
    # Most of the ten seconds a manual run may take to start, on a busy machine, was importing Dagster.
    script = (
        "import json, sys, pipelines_dagster.cli.runs, pipelines_dagster.launch; print(json.dumps(sorted(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    modules = set(json.loads(loaded))
    assert "pipelines_dagster.cli.runs" in modules
    assert not {module for module in modules if module == "dagster" or module.startswith(("dagster.", "dagster_"))}


def test_pipeline_commands_print_what_the_api_answers_for_the_same_pipeline(cli, workspace, connector, api):
    ws = str(workspace["id"])
    pipelines = f"/workspaces/{ws}/pipelines"
    schedule = ["--cron", "30 2 * * *", "--timezone", "UTC"]
    args = ["--workspace", ws, "--connector", str(connector["id"]), "--folder", "Docs", *schedule]
    made = cli.json("pipeline", "create", *args, "--name", "docs", "--backoff", "linear")
    assert made == api.get(f"{pipelines}/{made['id']}").json()
    body = {"connector_id": connector["id"], "folder": "Docs", "schedule": {"cron": "30 2 * * *", "timezone": "UTC"}}
    posted = api.post(pipelines, json={"name": "api", **body})
    assert posted.status_code == 201 and set(posted.json()) == set(made)
    assert {key: posted.json()[key] for key in ("folder_id", "schedule")} == {
        key: made[key] for key in ("folder_id", "schedule")
    }
    for command in (["update", "--name", "renamed", "--every-minutes", "15"], ["disable"], ["enable"], ["show"]):
        shown = cli.json("pipeline", command[0], "--workspace", ws, "--pipeline", str(made["id"]), *command[1:])
        assert shown == api.get(f"{pipelines}/{made['id']}").json(), command
    assert cli.json("pipeline", "list", "--workspace", ws) == api.get(pipelines).json()
    deleted = cli.json("pipeline", "delete", "--workspace", ws, "--pipeline", str(made["id"]))
    assert as_model(DeletedOut, deleted) == deleted == {"id": made["id"], "deleted": True}
    assert api.get(f"{pipelines}/{made['id']}").status_code == 404


def test_connector_create_prints_what_the_api_answers_for_the_connector(cli, workspace, api):
    ws = str(workspace["id"])
    for bounds in (
        ["--url", "https://example.com/a", "--index-every-minutes", "60"],
        ["--start-url", "https://docs.example.com/", "--max-depth", "2", "--include", "/docs/**"],
    ):
        made = cli.json("connector", "create", "--workspace", ws, "--type", "webcrawler", *bounds)
        assert made == api.get(f"/workspaces/{ws}/connectors/{made['id']}").json()


def test_trigger_and_event_commands_print_what_the_api_answers(cli, workspace, connector, api):
    ws = str(workspace["id"])
    made = cli.json("pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", "p")
    triggers = f"/workspaces/{ws}/pipelines/{made['id']}/triggers"
    of_pipeline = ["--workspace", ws, "--pipeline", str(made["id"])]

    def listed(trigger_id: int) -> dict[str, Any]:
        return next(trigger for trigger in api.get(triggers).json()["triggers"] if trigger["id"] == trigger_id)

    hook = cli.json("trigger", "create", *of_pipeline, "--kind", "webhook")
    assert as_model(NewWebhookOut, hook) == hook
    assert {key: value for key, value in hook.items() if key not in {"webhook_path", "secret"}} == listed(hook["id"])
    subscribed = cli.json("trigger", "create", *of_pipeline, "--kind", "event", "--event-type", "document.uploaded")
    assert subscribed == listed(subscribed["id"])
    [manual] = [trigger for trigger in api.get(triggers).json()["triggers"] if trigger["kind"] == "manual"]
    assert api.delete(f"{triggers}/{manual['id']}").status_code == 204
    again = cli.json("trigger", "create", *of_pipeline, "--kind", "manual")
    assert again == listed(again["id"])
    rotated = cli.json("trigger", "rotate-secret", *of_pipeline, "--trigger", str(hook["id"]))
    assert as_model(RotatedOut, rotated) == rotated
    assert {key: value for key, value in rotated.items() if key != "secret"} == listed(hook["id"])
    assert cli.json("trigger", "disable", *of_pipeline, "--trigger", str(again["id"])) == listed(again["id"])
    assert cli.json("trigger", "list", *of_pipeline) == api.get(triggers).json()

    recorded = cli.json("event", "emit", "--workspace", ws, "--event-type", "refresh.requested")
    answered = api.post(f"/workspaces/{ws}/events", json={"event_type": "refresh.requested"})
    assert answered.status_code == 202 and set(answered.json()) == set(recorded)
    assert (answered.json()["event_id"], recorded["event_type"]) == (recorded["event_id"] + 1, "refresh.requested")


@pytest.fixture
def billing_on(monkeypatch) -> None:
    """Crawls are charged: asked for before `api`, so the API's settings have it too."""
    monkeypatch.setenv("PIPELINES_BILLING_ENABLED", "true")


def test_credits_and_costs_print_what_the_api_answers(billing_on, cli, workspace, connector, api):
    ws = workspace["id"]
    granted = cli.json("credits", "grant", "--workspace", str(ws), "--micros", "5000")
    assert (
        as_model(CreditsGrantOut, granted)
        == granted
        == {
            "workspace_id": ws,
            "granted_micros": 5000,
            "balance_micros": 5000,
        }
    )
    made = cli.json("pipeline", "create", "--workspace", str(ws), "--connector", str(connector["id"]), "--name", "p")
    billing = Billing(session_factory(cli.engine()), enabled=True, micros_per_crawl=1000)
    billing.reserve(ws, 2, idempotency_key=f"run:{ws}", run_id="run")
    billing.charge(ws, 2000, idempotency_key=f"run:{ws}", usage={"pipeline_id": made["id"], "run_id": "run"})
    shown = cli.json("credits", "show", "--workspace", str(ws))
    assert shown == api.get(f"/workspaces/{ws}/credits").json() and shown["balance_micros"] == 3000
    window = ["--since", "2026-01-01", "--until", "2100-01-01"]
    charged = cli.json("costs", "--workspace", str(ws), *window)
    assert charged["micros"] == 2000 and [cost["pipeline_id"] for cost in charged["pipelines"]] == [made["id"]]
    params = {"since": "2026-01-01T00:00:00Z", "until": "2100-01-01T00:00:00Z"}
    assert charged == api.get(f"/workspaces/{ws}/costs", params=params).json()


def test_commands_without_an_api_route_print_a_model_of_api_schemas(cli, workspace):
    upgraded = cli.json("db", "upgrade")
    assert as_model(DatabaseOut, upgraded) == upgraded and upgraded["status"] == "current"
    assert as_model(NewWorkspaceOut, workspace) == workspace
    listed = cli.json("templates", "list")
    assert as_model(TemplateList, listed) == listed
    seeded = cli.json("templates", "seed", "--workspace", str(workspace["id"]))
    assert as_model(SeedOut, seeded) == seeded
