"""Run now, through a real Dagster webserver: the run lands queued in the instance, or is refused before it exists."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import httpx
import pytest
from click.testing import CliRunner

from pipelines_dagster.api.schemas.runs import RunLaunched
from pipelines_dagster.app_db.engine import create_engine, transaction
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.app_db.models import Connector
from pipelines_dagster.batch import pipeline_batch
from pipelines_dagster.cli.main import main
from pipelines_dagster.launch import PARTITION_TAG, GraphQLLauncher, launch_pipeline_run
from pipelines_dagster.runs import batch_tags
from pipelines_dagster.settings import DAGSTER_URL_ENV
from tests.api.conftest import REPO_DIR, Tenant, Webserver, free_port, new_tenant, settings_for


@pytest.fixture
def live(dagster_webserver: Webserver, client_for, tmp_path):
    """The app of the webserver's deployment, and a new workspace in it."""
    client = client_for(
        settings_for(dagster_webserver.engine, tmp_path / "data"),
        dagster_webserver.instance,
        dagster_webserver.launcher(),
    )
    return client, new_tenant(dagster_webserver.sessions)


def make_pipeline(client, tenant: Tenant, **fields) -> int:
    response = client.post(
        tenant.pipelines, headers=tenant.headers, json={"name": "p", "connector_id": tenant.connector_id, **fields}
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def run_ids(instance: dg.DagsterInstance, tenant: Tenant, pipeline_id: int) -> list[str]:
    # By workspace too: SQLite hands a deleted pipeline's id to the next one, and the
    # deployment's database outlives the tests.
    tags = {"pipeline_id": str(pipeline_id), "workspace_id": str(tenant.workspace_id)}
    return [run.run_id for run in instance.get_runs(dg.RunsFilter(tags=tags))]


def test_run_now_launches_a_queued_run_on_the_deployment(live, dagster_webserver: Webserver):
    client, tenant = live
    pipeline_id = make_pipeline(client, tenant)
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    # Where to follow it: the header and the body name the run in this API, and it answers there.
    location = f"{tenant.pipelines}/{pipeline_id}/runs/{run_id}"
    assert response.headers["location"] == response.json()["url"] == location
    followed = client.get(response.headers["location"], headers=tenant.headers)
    assert followed.status_code == 200 and followed.json()["run_id"] == run_id
    run = dagster_webserver.instance.get_run_by_id(run_id)
    assert run is not None and run.job_name == "pipeline_run"
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert {
        key: run.tags[key] for key in ("pipeline_id", "workspace_id", "trigger", PARTITION_TAG, "pipeline_name")
    } == {
        "pipeline_id": str(pipeline_id),
        "workspace_id": str(tenant.workspace_id),
        "trigger": "manual",
        # The partition the pipeline got when it was created: its id and name.
        PARTITION_TAG: f"{pipeline_id}-p",
        "pipeline_name": "p",
    }
    listed = client.get(f"{tenant.pipelines}/{pipeline_id}/runs", headers=tenant.headers).json()["runs"]
    assert [(r["run_id"], r["status"], r["trigger"]) for r in listed] == [(run_id, "queued", "manual")]


def test_run_now_on_a_pipeline_with_a_run_queued_or_in_progress_is_a_409_naming_that_run(live, dagster_webserver):
    client, tenant = live
    pipeline_id = make_pipeline(client, tenant)
    first = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers).json()["run_id"]
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 409
    assert response.json()["detail"].startswith(
        f"pipeline {pipeline_id} is busy: run {first} (pipeline_run, queued) is running it, so no second run is started"
    )
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == [first]


def test_run_now_on_a_pipeline_a_batch_run_covers_is_a_409_naming_the_batch(live, dagster_webserver):
    client, tenant = live
    covered, free = make_pipeline(client, tenant, name="covered"), make_pipeline(client, tenant, name="free")
    tags = batch_tags([(covered, tenant.workspace_id)], trigger="scheduled")
    batch = dagster_webserver.instance.create_run_for_job(
        pipeline_batch,
        run_config={
            "ops": {
                "run_pipelines": {
                    "config": {"pipelines": [{"pipeline_id": covered, "workspace_id": tenant.workspace_id}]}
                }
            }
        },
        tags=tags,
        status=dg.DagsterRunStatus.STARTED,
    )
    try:
        response = client.post(f"{tenant.pipelines}/{covered}/run", headers=tenant.headers)
        assert response.status_code == 409
        assert f"run {batch.run_id} (pipeline_batch, started)" in response.json()["detail"]
        assert client.post(f"{tenant.pipelines}/{free}/run", headers=tenant.headers).status_code == 202
    finally:
        dagster_webserver.instance.report_run_failed(batch)


def test_a_disabled_pipeline_is_refused_with_the_reason_and_no_run(live, dagster_webserver):
    client, tenant = live
    pipeline_id = make_pipeline(client, tenant, enabled=False)
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 409
    assert response.json() == {"detail": f"pipeline {pipeline_id} is disabled; enable it before running it"}
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == []


def manual_trigger_id(client, tenant: Tenant, pipeline_id: int) -> int:
    triggers = client.get(f"{tenant.pipelines}/{pipeline_id}/triggers", headers=tenant.headers).json()["triggers"]
    [manual] = [trigger["id"] for trigger in triggers if trigger["kind"] == "manual"]
    return manual


def test_a_pipeline_whose_manual_trigger_is_off_is_refused_with_how_to_switch_it_on(live, dagster_webserver):
    client, tenant = live
    pipeline_id = make_pipeline(client, tenant)
    trigger_id = manual_trigger_id(client, tenant, pipeline_id)
    triggers = f"{tenant.pipelines}/{pipeline_id}/triggers"
    assert client.post(f"{triggers}/{trigger_id}/disable", headers=tenant.headers).status_code == 200
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 409
    assert response.json() == {
        "detail": f"pipeline {pipeline_id} has no enabled manual trigger (trigger {trigger_id} is off), so it cannot "
        f"be run by hand; enable it with `pipelines-dagster trigger enable --workspace {tenant.workspace_id} "
        f"--pipeline {pipeline_id} --trigger {trigger_id}` (API: POST .../triggers/{trigger_id}/enable)"
    }
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == []
    assert client.post(f"{triggers}/{trigger_id}/enable", headers=tenant.headers).status_code == 200
    launched = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert launched.status_code == 202, launched.text
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == [launched.json()["run_id"]]


def test_a_pipeline_without_a_manual_trigger_is_refused_until_it_gets_one_back(live, dagster_webserver):
    client, tenant = live
    pipeline_id = make_pipeline(client, tenant)
    triggers = f"{tenant.pipelines}/{pipeline_id}/triggers"
    deleted = client.delete(f"{triggers}/{manual_trigger_id(client, tenant, pipeline_id)}", headers=tenant.headers)
    assert deleted.status_code == 204
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"pipeline {pipeline_id} has no manual trigger, so it cannot be run by hand; add one with "
        f"`pipelines-dagster trigger create --workspace {tenant.workspace_id} --pipeline {pipeline_id} --kind manual` "
        '(API: POST .../triggers {"kind": "manual"})'
    )
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == []
    added = client.post(triggers, headers=tenant.headers, json={"kind": "manual"})
    assert added.status_code == 201 and (added.json()["kind"], added.json()["enabled"]) == ("manual", True)
    again = client.post(triggers, headers=tenant.headers, json={"kind": "manual"})
    assert again.status_code == 422 and "already has a manual trigger" in again.text
    launched = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert launched.status_code == 202, launched.text
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == [launched.json()["run_id"]]


def test_a_pipeline_over_a_connector_without_executor_is_refused(live, dagster_webserver):
    client, tenant = live
    with transaction(dagster_webserver.sessions) as session:
        drive = Connector(workspace_id=tenant.workspace_id, name="drive", connector_type="dropbox")
        session.add(drive)
        session.flush()
        drive_id = drive.id
    pipeline_id = make_pipeline(client, tenant, connector_id=drive_id)
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 409 and response.json() == {"detail": "executor not implemented for dropbox"}
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == []


def test_launches_from_many_requests_at_once_each_get_their_run(live, dagster_webserver):
    client, tenant = live
    pipeline_ids = [make_pipeline(client, tenant, name=f"p{n}") for n in range(4)]
    launcher = dagster_webserver.launcher()
    with ThreadPoolExecutor(max_workers=4) as pool:
        launched = list(
            pool.map(
                lambda pipeline_id: launch_pipeline_run(
                    dagster_webserver.sessions,
                    workspace_id=tenant.workspace_id,
                    pipeline_id=pipeline_id,
                    launcher=launcher,
                ),
                pipeline_ids,
            )
        )
    assert [run_ids(dagster_webserver.instance, tenant, p) for p in pipeline_ids] == [[run] for run in launched]


def test_a_server_that_is_not_dagster_is_a_502(client_for, dagster_webserver, web, tmp_path):
    client = client_for(
        settings_for(dagster_webserver.engine, tmp_path / "data"),
        dagster_webserver.instance,
        GraphQLLauncher(web.url("/")),
    )
    tenant = new_tenant(dagster_webserver.sessions)
    pipeline_id = make_pipeline(client, tenant)
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 502
    detail = response.json()["detail"]
    assert (
        detail.startswith(f"the Dagster webserver at {web.url('')} did not launch the run (") and "query" not in detail
    )


def test_an_unreachable_webserver_is_a_503_that_says_what_to_start(client, tenant: Tenant):
    pipeline_id = make_pipeline(client, tenant)
    response = client.post(f"{tenant.pipelines}/{pipeline_id}/run", headers=tenant.headers)
    assert response.status_code == 503
    assert "cannot reach the Dagster webserver" in response.json()["detail"]
    assert "dagster dev" in response.json()["detail"]


@pytest.fixture
def cli_env(monkeypatch, tmp_path, dagster_webserver: Webserver):
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINES_DATABASE_URL", dagster_webserver.engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv(DAGSTER_URL_ENV, dagster_webserver.url)
    return CliRunner()


def test_cli_pipeline_run_prints_the_run_id_and_refuses_a_second_while_the_first_is_queued(
    cli_env, live, dagster_webserver
):
    client, tenant = live
    pipeline_id, other = make_pipeline(client, tenant), make_pipeline(client, tenant, name="other")

    def run(pipeline: int, *flags: str):
        args = ["pipeline", "run", "--workspace", str(tenant.workspace_id), "--pipeline", str(pipeline), *flags]
        return cli_env.invoke(main, args, catch_exceptions=False)

    text = run(pipeline_id)
    assert text.exit_code == 0, text.output
    run_id, link = text.output.splitlines()
    # The run's page in the UI of the webserver it was launched through.
    assert link == f"{dagster_webserver.url}/runs/{run_id}"
    # No daemon here: the first run stays queued, so the pipeline is busy.
    again = run(pipeline_id)
    assert (
        again.exit_code == 1 and f"pipeline {pipeline_id} is busy: run {run_id} (pipeline_run, queued)" in again.output
    )
    assert run_ids(dagster_webserver.instance, tenant, pipeline_id) == [run_id]
    as_json = json.loads(run(other, "--json").output)
    assert run_ids(dagster_webserver.instance, tenant, other) == [as_json["run_id"]]
    # --json is what POST .../run answers, here for a run of a third pipeline.
    third = make_pipeline(client, tenant, name="third")
    answered = client.post(f"{tenant.pipelines}/{third}/run", headers=tenant.headers)
    assert answered.status_code == 202 and set(as_json) == set(answered.json()) == set(RunLaunched.model_fields)


def test_cli_pipeline_run_refusals_are_one_line_and_say_what_to_do(cli_env, live, monkeypatch, dagster_webserver):
    client, tenant = live
    disabled = make_pipeline(client, tenant, enabled=False)
    enabled = make_pipeline(client, tenant, name="on")
    manual_off = make_pipeline(client, tenant, name="manual off")
    switched = manual_trigger_id(client, tenant, manual_off)
    workspace = str(tenant.workspace_id)
    switch_off = ["trigger", "disable", "--workspace", workspace, "--pipeline", str(manual_off), "--trigger"]
    off = cli_env.invoke(main, [*switch_off, str(switched)])
    assert off.exit_code == 0, off.output
    cases = [
        ([workspace, str(disabled)], "is disabled"),
        ([str(tenant.workspace_id + 1), str(enabled)], f"is not in workspace {tenant.workspace_id + 1}"),
        (
            [workspace, str(manual_off)],
            f"has no enabled manual trigger (trigger {switched} is off), so it cannot be run by hand; enable it with "
            f"`pipelines-dagster trigger enable --workspace {workspace} --pipeline {manual_off} --trigger {switched}`",
        ),
    ]
    for (workspace, pipeline), message in cases:
        result = cli_env.invoke(main, ["pipeline", "run", "--workspace", workspace, "--pipeline", pipeline])
        assert result.exit_code == 1 and result.output.count("\n") == 1 and message in result.output, result.output
    assert run_ids(dagster_webserver.instance, tenant, manual_off) == []
    # One whose manual trigger is gone gets it back from `trigger create`, and then runs.
    client.delete(f"{tenant.pipelines}/{manual_off}/triggers/{switched}", headers=tenant.headers)
    missing = cli_env.invoke(main, ["pipeline", "run", "--workspace", workspace, "--pipeline", str(manual_off)])
    assert missing.exit_code == 1 and f"--pipeline {manual_off} --kind manual`" in missing.output, missing.output
    created = cli_env.invoke(
        main, ["trigger", "create", "--workspace", workspace, "--pipeline", str(manual_off), "--kind", "manual"]
    )
    assert created.exit_code == 0 and created.output.startswith("manual trigger "), created.output
    ran = cli_env.invoke(
        main, ["pipeline", "run", "--workspace", workspace, "--pipeline", str(manual_off)], catch_exceptions=False
    )
    assert ran.exit_code == 0 and run_ids(dagster_webserver.instance, tenant, manual_off) == [ran.output.split()[0]]
    monkeypatch.setenv(DAGSTER_URL_ENV, f"http://127.0.0.1:{free_port()}")
    result = cli_env.invoke(
        main, ["pipeline", "run", "--workspace", str(tenant.workspace_id), "--pipeline", str(enabled)]
    )
    assert result.exit_code == 1 and "cannot reach the Dagster webserver" in result.output


def test_cli_api_serves_the_openapi_document(tmp_path):
    data = tmp_path / "data"
    upgrade(create_engine(f"sqlite:///{data / 'app.sqlite3'}"))
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "PIPELINES_DATA_DIR": str(data), "DAGSTER_HOME": str(tmp_path / "home")}
    command = [str(Path(sys.executable).with_name("pipelines-dagster")), "api", "--port", str(port)]
    server = subprocess.Popen(command, cwd=REPO_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, server.stdout.read().decode()
                time.sleep(0.2)
        assert response.status_code == 200
        assert "/workspaces/{workspace_id}/pipelines/{pipeline_id}/run" in response.json()["paths"]
        assert httpx.get(f"http://127.0.0.1:{port}/workspaces/1/pipelines").status_code == 401
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_cli_api_says_to_migrate_an_empty_database(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PIPELINES_DATABASE_URL", raising=False)
    result = CliRunner().invoke(main, ["api"])
    assert result.exit_code == 1 and "pipelines-dagster db upgrade" in result.output
