"""Pipelines CRUD: validation per field with nothing written, partitions that follow, the de-dup guard."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.app_db.models import Connector, Folder, Pipeline, PipelineTrigger
from pipelines_dagster.core.catalog.pipelines import pipeline_queues
from pipelines_dagster.core.run.plan import plan_run
from pipelines_dagster.partitions import pipelines_partitions
from tests.api.conftest import Tenant, new_tenant
from tests.support.db import row_counts


def partitions(instance) -> set[str]:
    return set(instance.get_dynamic_partitions(pipelines_partitions.name))


def create(client, tenant: Tenant, **fields):
    return client.post(tenant.pipelines, headers=tenant.headers, json={"connector_id": tenant.connector_id, **fields})


WRITABLE = (
    "name",
    "connector_id",
    "save_to_kb",
    "enabled",
    "folder_id",
    "schedule",
    "urls",
    "max_runtime_seconds",
    "worker_queue",
)


def replacement(shown: dict, **fields) -> dict:
    """A PUT body: the writable fields of a pipeline as GET shows it, with `fields` changed."""
    body = {name: shown[name] for name in WRITABLE}
    if body["schedule"] is not None:
        body["schedule"] = {key: shown["schedule"][key] for key in ("cron", "timezone", "every_minutes")}
    policy = shown["retry_policy"]
    body["retry_policy"] = {key: policy[key] for key in ("backoff", "max_retries", "delay_seconds")}
    return body | fields


def fields_of(response) -> list[str]:
    assert response.status_code == 422, response.text
    return [error["field"] for error in response.json()["detail"]]


def test_create_read_list_and_the_partition_registered_with_it(client, instance, tenant: Tenant):
    response = create(
        client,
        tenant,
        name="Docs nightly",
        folder="Docs",
        urls=["https://docs.example.com/a ", "https://docs.example.com/a"],
        schedule={"cron": "30 2 * * *", "timezone": "Europe/Stockholm"},
        save_to_kb=False,
    )
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["name"] == "Docs nightly" and created["save_to_kb"] is False and created["enabled"] is True
    assert created["urls"] == ["https://docs.example.com/a"]
    assert created["folder_id"] is not None and created["system_managed"] is False
    schedule = created["schedule"]
    assert (schedule["cron"], schedule["timezone"], schedule["every_minutes"]) == (
        "30 2 * * *",
        "Europe/Stockholm",
        None,
    )
    # 02:30 in Stockholm is 00:30 or 01:30 UTC, depending on the season.
    next_fire = datetime.fromisoformat(schedule["next_fire_at"])
    assert next_fire.minute == 30 and next_fire.hour in {0, 1}
    assert created["partition_key"] == f"{created['id']}-docs-nightly"
    assert created["partition_key"] in partitions(instance)

    assert client.get(f"{tenant.pipelines}/{created['id']}", headers=tenant.headers).json() == created
    listed = client.get(tenant.pipelines, headers=tenant.headers).json()["pipelines"]
    assert [p["id"] for p in listed] == [created["id"]]


def test_folder_id_of_the_workspace_and_the_connector_own_urls(client, sessions, tenant: Tenant):
    with transaction(sessions) as session:
        folder = Folder(workspace_id=tenant.workspace_id, name="Handbook")
        session.add(folder)
        session.flush()
        folder_id = folder.id
    created = create(client, tenant, name="p", folder_id=folder_id).json()
    assert created["folder_id"] == folder_id and created["urls"] is None and created["schedule"] is None


INVALID_BODIES = [
    ({"name": "  "}, ["name"]),
    ({"name": "x" * 201}, ["name"]),
    ({"name": "p", "schedule": {"cron": "0 3 * * *"}}, ["schedule.timezone"]),
    ({"name": "p", "schedule": {"timezone": "UTC"}}, ["schedule.timezone"]),
    ({"name": "p", "schedule": {"cron": "0 3 * * *", "timezone": "UTC", "every_minutes": 5}}, ["schedule.cron"]),
    ({"name": "p", "schedule": {"cron": "every day", "timezone": "UTC"}}, ["schedule.cron"]),
    ({"name": "p", "schedule": {"cron": "0 3 * * *", "timezone": "Mars/Olympus"}}, ["schedule.timezone"]),
    ({"name": "p", "schedule": {"every_minutes": 0}}, ["schedule.every_minutes"]),
    ({"name": "p", "schedule": {}}, ["schedule.cron"]),
    ({"name": "p", "urls": []}, ["urls"]),
    ({"name": "p", "urls": ["ftp://files.example.com/"]}, ["urls"]),
    ({"name": "p", "urls": ["https://user:pw@example.com/"]}, ["urls"]),
    ({"name": "p", "folder": "Docs", "folder_id": 1}, ["folder_id"]),
    ({"name": "p", "folder": "\x07bell"}, ["folder"]),
    ({"name": "p", "connector_id": "one"}, ["connector_id"]),
    ({"name": "p", "connector_id": 0}, ["connector_id"]),
    ({"name": "p", "enabled": "perhaps"}, ["enabled"]),
    ({"name": "p", "colour": "red"}, ["colour"]),
    ({"connector_id": 1}, ["name"]),
    ({"name": "p", "retry_policy": {"backoff": "fibonacci"}}, ["retry_policy.backoff"]),
    ({"name": "p", "retry_policy": {"max_retries": -1}}, ["retry_policy.max_retries"]),
    ({"name": "p", "retry_policy": {"max_retries": 11}}, ["retry_policy.max_retries"]),
    ({"name": "p", "retry_policy": {"delay_seconds": 0}}, ["retry_policy.delay_seconds"]),
    ({"name": "p", "retry_policy": {"delay_seconds": -1.5}}, ["retry_policy.delay_seconds"]),
    ({"name": "p", "retry_policy": {"jitter": True}}, ["retry_policy.jitter"]),
    ({"name": "p", "max_runtime_seconds": 9}, ["max_runtime_seconds"]),
    ({"name": "p", "max_runtime_seconds": 604801}, ["max_runtime_seconds"]),
    ({"name": "p", "max_runtime_seconds": 60.5}, ["max_runtime_seconds"]),
    ({"name": "p", "max_runtime_seconds": "3600"}, ["max_runtime_seconds"]),
    ({"name": "p", "max_runtime_seconds": True}, ["max_runtime_seconds"]),
    ({"name": "p", "worker_queue": ""}, ["worker_queue"]),
    ({"name": "p", "worker_queue": "a,b"}, ["worker_queue"]),
    ({"name": "p", "worker_queue": "amq.gen"}, ["worker_queue"]),
    ({"name": "p", "worker_queue": "q" * 65}, ["worker_queue"]),
    ({"name": "p", "worker_queue": 7}, ["worker_queue"]),
    (
        {"name": "", "urls": ["nope"], "schedule": {"cron": "61 * * * *", "timezone": "Nowhere/None"}},
        ["name", "schedule.cron", "schedule.timezone", "urls"],
    ),
]


@pytest.mark.parametrize(("body", "fields"), INVALID_BODIES)
def test_invalid_input_answers_422_per_field_and_writes_nothing(client, app_engine, instance, tenant, body, fields):
    before, known = row_counts(app_engine), partitions(instance)
    response = client.post(tenant.pipelines, headers=tenant.headers, json={"connector_id": tenant.connector_id, **body})
    assert sorted(fields_of(response)) == fields
    assert all(error["message"] for error in response.json()["detail"])
    assert row_counts(app_engine) == before and partitions(instance) == known


def test_references_must_be_of_the_same_workspace_and_names_unique(client, app_engine, sessions, instance, tenant):
    other = new_tenant(sessions, name="globex")
    with transaction(sessions) as session:
        foreign = Folder(workspace_id=other.workspace_id, name="Theirs")
        session.add(foreign)
        session.flush()
        foreign_folder = foreign.id
    assert create(client, tenant, name="taken").status_code == 201
    before, known = row_counts(app_engine), partitions(instance)
    assert fields_of(create(client, tenant, name="taken")) == ["name"]
    assert fields_of(create(client, tenant, name="p", connector_id=other.connector_id)) == ["connector_id"]
    assert fields_of(create(client, tenant, name="p", folder_id=foreign_folder)) == ["folder_id"]
    assert fields_of(create(client, tenant, name="p", connector_id=10**9)) == ["connector_id"]
    assert row_counts(app_engine) == before and partitions(instance) == known


def test_urls_only_go_with_a_web_connector(client, sessions, tenant):
    with transaction(sessions) as session:
        drive = Connector(workspace_id=tenant.workspace_id, name="drive", connector_type="google_drive")
        session.add(drive)
        session.flush()
        drive_id = drive.id
    response = create(client, tenant, name="p", connector_id=drive_id, urls=["https://example.com/"])
    assert fields_of(response) == ["urls"]
    assert create(client, tenant, name="p", connector_id=drive_id).status_code == 201


def trigger_of(sessions, pipeline_id: int) -> PipelineTrigger | None:
    with sessions() as session:
        schedule = PipelineTrigger.pipeline_id == pipeline_id, PipelineTrigger.kind == "schedule"
        return session.scalar(sa.select(PipelineTrigger).where(*schedule))


def test_put_replaces_the_pipeline_with_the_whole_one_given(client, sessions, tenant):
    created = create(
        client, tenant, name="p", folder="Docs", urls=["https://a.example/"], schedule={"every_minutes": 30}
    )
    created = created.json()
    path = f"{tenant.pipelines}/{created['id']}"
    # What GET shows, put back, changes nothing but the update time.
    same = client.put(path, headers=tenant.headers, json=replacement(created))
    assert same.status_code == 200, same.text
    assert {k: v for k, v in same.json().items() if k != "updated_at"} == {
        k: v for k, v in created.items() if k != "updated_at"
    }
    whole = replacement(
        created,
        name="replaced",
        save_to_kb=False,
        enabled=False,
        folder_id=None,
        schedule=None,
        urls=None,
        retry_policy={"backoff": "linear", "max_retries": 1, "delay_seconds": 10},
        max_runtime_seconds=600,
        worker_queue="site-crawls",
    )
    replaced = client.put(path, headers=tenant.headers, json=whole).json()
    assert {name: replaced[name] for name in WRITABLE} == {name: whole[name] for name in WRITABLE}
    assert replaced["retry_policy"]["backoff"] == "linear" and replaced["retry_policy"]["max_retries"] == 1
    assert trigger_of(sessions, created["id"]) is None
    assert client.get(path, headers=tenant.headers).json() == replaced


def test_a_put_missing_a_field_is_a_422_naming_each_and_changes_nothing(client, app_engine, tenant):
    created = create(client, tenant, name="p", schedule={"every_minutes": 30}).json()
    path = f"{tenant.pipelines}/{created['id']}"
    before = row_counts(app_engine), client.get(path, headers=tenant.headers).json()
    body = replacement(created, name="renamed")
    del body["schedule"], body["retry_policy"]
    refused = client.put(path, headers=tenant.headers, json=body)
    assert refused.status_code == 422
    assert {error["field"] for error in refused.json()["detail"]} == {"schedule", "retry_policy"}
    assert all(
        "PUT replaces the whole object" in e["message"] and "PATCH" in e["message"] for e in refused.json()["detail"]
    )
    # A PATCH with the same body changes what it names.
    assert client.put(path, headers=tenant.headers, json={"name": "renamed"}).status_code == 422
    assert (row_counts(app_engine), client.get(path, headers=tenant.headers).json()) == before
    assert client.patch(path, headers=tenant.headers, json=body).json()["name"] == "renamed"


def test_patch_changes_only_the_fields_given(client, sessions, tenant):
    created = create(
        client,
        tenant,
        name="p",
        folder="Docs",
        urls=["https://a.example/"],
        save_to_kb=True,
        schedule={"every_minutes": 30},
    ).json()
    path = f"{tenant.pipelines}/{created['id']}"
    renamed = client.patch(path, headers=tenant.headers, json={"name": "renamed"}).json()
    assert renamed["name"] == "renamed"
    assert {k: v for k, v in renamed.items() if k not in {"name", "updated_at"}} == {
        k: v for k, v in created.items() if k not in {"name", "updated_at"}
    }
    cleared = client.patch(
        path, headers=tenant.headers, json={"folder": None, "urls": None, "schedule": None, "save_to_kb": False}
    ).json()
    assert (cleared["folder_id"], cleared["urls"], cleared["schedule"], cleared["save_to_kb"]) == (
        None,
        None,
        None,
        False,
    )
    assert trigger_of(sessions, created["id"]) is None
    again = client.patch(path, headers=tenant.headers, json={"folder": "Docs", "urls": ["https://b.example/"]}).json()
    assert again["folder_id"] == created["folder_id"] and again["urls"] == ["https://b.example/"]
    assert client.patch(path, headers=tenant.headers, json={}).json()["name"] == "renamed"


def test_a_retry_policy_is_set_at_creation_shown_and_changed(client, tenant):
    default = create(client, tenant, name="default").json()
    assert default["retry_policy"] == {
        "backoff": "exponential",
        "max_retries": 3,
        "delay_seconds": 2.0,
        "description": "exponential backoff, up to 3 retries, waiting 2, 4, 8 s",
    }
    linear = create(
        client, tenant, name="linear", retry_policy={"backoff": "linear", "max_retries": 2, "delay_seconds": 5}
    ).json()
    assert linear["retry_policy"]["description"] == "linear backoff, up to 2 retries, waiting 5, 10 s"
    path = f"{tenant.pipelines}/{linear['id']}"
    refused = client.patch(path, headers=tenant.headers, json={"retry_policy": {"delay_seconds": 0}})
    assert fields_of(refused) == ["retry_policy.delay_seconds"]
    assert fields_of(client.patch(path, headers=tenant.headers, json={"retry_policy": None})) == ["retry_policy"]
    assert client.get(path, headers=tenant.headers).json()["retry_policy"] == linear["retry_policy"]
    changed = client.patch(path, headers=tenant.headers, json={"retry_policy": {"max_retries": 0}}).json()
    assert changed["retry_policy"]["max_retries"] == 0 and changed["retry_policy"]["backoff"] == "exponential"


def test_a_max_runtime_is_set_at_creation_shown_changed_and_reset_to_the_deployments(client, sessions, tenant):
    default = create(client, tenant, name="default").json()
    assert default["max_runtime_seconds"] is None
    long = create(client, tenant, name="long", max_runtime_seconds=14400).json()
    assert long["max_runtime_seconds"] == 14400
    path = f"{tenant.pipelines}/{long['id']}"
    assert fields_of(client.patch(path, headers=tenant.headers, json={"max_runtime_seconds": 5})) == [
        "max_runtime_seconds"
    ]
    assert client.get(path, headers=tenant.headers).json()["max_runtime_seconds"] == 14400
    assert client.patch(path, headers=tenant.headers, json={"name": "renamed"}).json()["max_runtime_seconds"] == 14400
    assert (
        client.patch(path, headers=tenant.headers, json={"max_runtime_seconds": 60}).json()["max_runtime_seconds"] == 60
    )
    with sessions() as session:
        assert plan_run(session, long["id"], keyring=None).max_runtime_seconds == 60
    assert (
        client.patch(path, headers=tenant.headers, json={"max_runtime_seconds": None}).json()["max_runtime_seconds"]
        is None
    )
    with sessions() as session:
        assert plan_run(session, long["id"], keyring=None).max_runtime_seconds is None


def test_a_worker_queue_is_set_at_creation_shown_changed_and_given_back_to_the_default(client, sessions, tenant):
    assert create(client, tenant, name="default").json()["worker_queue"] is None
    heavy = create(client, tenant, name="heavy", worker_queue="site-crawls").json()
    assert heavy["worker_queue"] == "site-crawls"
    path = f"{tenant.pipelines}/{heavy['id']}"
    refused = client.patch(path, headers=tenant.headers, json={"worker_queue": "amq.direct"})
    assert fields_of(refused) == ["worker_queue"]
    assert "RabbitMQ's own" in refused.json()["detail"][0]["message"]
    assert client.get(path, headers=tenant.headers).json()["worker_queue"] == "site-crawls"
    assert client.patch(path, headers=tenant.headers, json={"name": "renamed"}).json()["worker_queue"] == "site-crawls"
    assert client.patch(path, headers=tenant.headers, json={"worker_queue": "bulk"}).json()["worker_queue"] == "bulk"
    with sessions() as session:
        assert pipeline_queues(session, [heavy["id"]]) == {heavy["id"]: "bulk"}
    assert client.patch(path, headers=tenant.headers, json={"worker_queue": None}).json()["worker_queue"] is None
    with sessions() as session:
        assert pipeline_queues(session, [heavy["id"]]) == {}


def test_put_refuses_null_for_fields_that_have_no_null(client, tenant):
    created = create(client, tenant, name="p").json()
    response = client.patch(
        f"{tenant.pipelines}/{created['id']}",
        headers=tenant.headers,
        json={"name": None, "enabled": None, "save_to_kb": None},
    )
    assert sorted(fields_of(response)) == ["enabled", "name", "save_to_kb"]


def test_a_failed_put_leaves_the_pipeline_as_it_was(client, app_engine, sessions, tenant):
    with transaction(sessions) as session:
        drive = Connector(workspace_id=tenant.workspace_id, name="drive", connector_type="google_drive")
        session.add(drive)
        session.flush()
        drive_id = drive.id
    created = create(client, tenant, name="p", connector_id=drive_id, schedule={"every_minutes": 10}).json()
    path = f"{tenant.pipelines}/{created['id']}"
    before = row_counts(app_engine)
    # The rename and the new folder are written before the URLs are found not to fit the connector.
    response = client.patch(
        path,
        headers=tenant.headers,
        json={
            "name": "renamed",
            "folder": "New folder",
            "schedule": {"every_minutes": 20},
            "urls": ["https://a.example/"],
        },
    )
    assert fields_of(response) == ["urls"]
    assert row_counts(app_engine) == before
    assert client.get(path, headers=tenant.headers).json() == created


def test_editing_the_schedule_gives_it_a_new_next_fire_time(client, sessions, tenant):
    created = create(client, tenant, name="p", schedule={"cron": "0 6 * * *", "timezone": "UTC"}).json()
    path = f"{tenant.pipelines}/{created['id']}"
    long_ago = datetime(2020, 1, 1, tzinfo=UTC)
    with transaction(sessions) as session:
        session.execute(
            sa.update(PipelineTrigger).where(PipelineTrigger.pipeline_id == created["id"]).values(next_fire_at=long_ago)
        )
    same = client.patch(path, headers=tenant.headers, json={"schedule": {"cron": "0  6 * * *", "timezone": "UTC"}})
    assert datetime.fromisoformat(same.json()["schedule"]["next_fire_at"]) == long_ago
    moved = client.patch(
        path, headers=tenant.headers, json={"schedule": {"cron": "0 6 * * *", "timezone": "America/New_York"}}
    ).json()
    next_fire = datetime.fromisoformat(moved["schedule"]["next_fire_at"])
    now = datetime.now(UTC)
    assert now < next_fire <= now + timedelta(days=1) and next_fire.hour in {10, 11}
    interval = client.patch(path, headers=tenant.headers, json={"schedule": {"every_minutes": 15}}).json()["schedule"]
    assert (interval["cron"], interval["timezone"], interval["every_minutes"]) == (None, None, 15)
    assert datetime.fromisoformat(interval["next_fire_at"]) <= datetime.now(UTC) + timedelta(minutes=15)


def test_enable_and_disable_run_the_dedup_guard(client, sessions):
    owner = new_tenant(sessions, name="initech", index_every_minutes=60)
    listed = client.get(owner.pipelines, headers=owner.headers).json()["pipelines"]
    [system] = [p for p in listed if p["system_managed"]]
    assert system["schedule"]["enabled"] is True

    created = client.post(
        owner.pipelines, headers=owner.headers, json={"name": "mine", "connector_id": owner.connector_id}
    ).json()
    assert client.get(f"{owner.pipelines}/{system['id']}", headers=owner.headers).json()["schedule"]["enabled"] is False

    path = f"{owner.pipelines}/{created['id']}"
    assert client.patch(path, headers=owner.headers, json={"enabled": False}).json()["enabled"] is False
    restored = client.get(f"{owner.pipelines}/{system['id']}", headers=owner.headers).json()["schedule"]
    assert restored["enabled"] is True and restored["next_fire_at"] is not None
    client.patch(path, headers=owner.headers, json={"enabled": True})
    assert client.get(f"{owner.pipelines}/{system['id']}", headers=owner.headers).json()["schedule"]["enabled"] is False
    with sessions() as session:
        assert session.get(Connector, owner.connector_id).periodic_indexing_enabled is False


def test_the_connector_own_indexing_pipeline_cannot_be_edited_or_deleted(client, sessions):
    owner = new_tenant(sessions, name="initech", index_every_minutes=60)
    [system] = client.get(owner.pipelines, headers=owner.headers).json()["pipelines"]
    path = f"{owner.pipelines}/{system['id']}"
    for response in (
        client.patch(path, headers=owner.headers, json={"enabled": False}),
        client.delete(path, headers=owner.headers),
    ):
        assert response.status_code == 409 and "periodic indexing" in response.json()["detail"]
    assert client.get(path, headers=owner.headers).json() == system


def test_delete_removes_the_pipeline_its_triggers_and_its_partition(client, sessions, instance, tenant):
    created = create(client, tenant, name="p", schedule={"every_minutes": 5}).json()
    path = f"{tenant.pipelines}/{created['id']}"
    response = client.delete(path, headers=tenant.headers)
    assert response.status_code == 204 and response.content == b""
    assert str(created["id"]) not in partitions(instance)
    assert trigger_of(sessions, created["id"]) is None
    with sessions() as session:
        assert session.get(Pipeline, created["id"]) is None
    for response in (
        client.get(path, headers=tenant.headers),
        client.delete(path, headers=tenant.headers),
        client.patch(path, headers=tenant.headers, json={"name": "back"}),
    ):
        assert response.status_code == 404
        assert response.json() == {"detail": f"pipeline {created['id']} is not in workspace {tenant.workspace_id}"}


def test_another_workspace_pipeline_is_not_found_under_ones_own(client, tenant, other):
    theirs = create(client, other, name="theirs").json()
    path = f"{tenant.pipelines}/{theirs['id']}"
    for method in ("GET", "PATCH", "DELETE"):
        assert client.request(method, path, headers=tenant.headers, json={}).status_code == 404
    whole = replacement(theirs, connector_id=tenant.connector_id)
    assert client.put(path, headers=tenant.headers, json=whole).status_code == 404
    assert client.get(f"{other.pipelines}/{theirs['id']}", headers=other.headers).json() == theirs


def test_unknown_methods_name_the_allowed_ones(client, tenant):
    response = client.post(f"{tenant.pipelines}/1", headers=tenant.headers, json={})
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, PUT, PATCH, DELETE"
    assert response.json() == {"detail": "Method Not Allowed"}


def test_the_cli_refuses_another_workspaces_connector_as_the_api_does(
    client, app_engine, instance, monkeypatch, tmp_path, tenant, other
):
    from click.testing import CliRunner

    from pipelines_dagster.cli.main import main

    before = row_counts(app_engine)
    [error] = client.post(
        tenant.pipelines, headers=tenant.headers, json={"name": "p", "connector_id": other.connector_id}
    ).json()["detail"]
    monkeypatch.setenv("PIPELINES_DATABASE_URL", app_engine.url.render_as_string(hide_password=False))
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path / "cli-data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "cli-dagster-home"))
    result = CliRunner().invoke(
        main,
        [
            "pipeline",
            "create",
            "--workspace",
            str(tenant.workspace_id),
            "--connector",
            str(other.connector_id),
            "--name",
            "p",
        ],
    )
    assert error == {
        "field": "connector_id",
        "message": f"connector {other.connector_id} is not in workspace {tenant.workspace_id}",
    }
    assert result.exit_code == 1 and result.output == f"Error: --connector: {error['message']}\n"
    assert row_counts(app_engine) == before
