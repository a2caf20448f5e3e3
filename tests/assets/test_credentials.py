"""Credentials through whole runs on real services: a site that requires them is crawled into the KB, twice (the
second crawl conditional), and then every place a run leaves something is searched byte by byte for each value:
every answer of the connector, pipeline and run routes, the captured log output, every file of the Dagster instance
(event log, run storage: tags and config), every blob written, every notification sent, and the whole app database,
whose credentials column holds them sealed."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from pipelines_dagster.core.catalog.connectors import ConnectorChanges
from pipelines_dagster.core.crawl.credentials import Credentials
from pipelines_dagster.core.security.keyring import new_key, write_key_file
from pipelines_dagster.runs import run_tags
from pipelines_dagster.settings import load_settings
from tests.api.conftest import client_for, tenants_of  # noqa: F401  (fixture)
from tests.assets.conftest import Stack, code_location_job, materialization, subscriptions
from tests.assets.test_crawl_health import run_pipeline
from tests.notifications.test_events import RunEndSensors, send_due
from tests.support.web import Reply, Request, page

USER, PASSWORD = "crawler", "pw-run-a41c9e7d"
TOKEN = "tok-run-0b7f35e2"
API_KEY = "key-run-c96d14ab"
SESSION = "sess-run-58e2f0c3"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = {value.encode() for value in (PASSWORD, BASIC, TOKEN, API_KEY, SESSION)}
PAGES = 3


@pytest.fixture
def keyed(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The stack with a deployment's secrets key, which its run resources and its API read from the environment."""
    monkeypatch.setenv("PIPELINES_SECRETS_KEY", new_key())
    stack.secrets_from_env = True
    return stack


@pytest.fixture
def subscribe(stack: Stack) -> Iterator[Callable[[int], None]]:
    """Subscribe a workspace to run.succeeded and pages.changed (deleted afterwards, with its deliveries)."""
    with subscriptions(stack, ["run.succeeded", "pages.changed"]) as to:
        yield to


def behind_a_login(stack: Stack, prefix: str, credential: str, expected: str) -> list[str]:
    """Pages under `prefix` answered only to a request whose `credential` header holds `expected`."""

    def handler(n: int):
        def handle(request: Request) -> Reply:
            if expected not in request.headers.get(credential, ""):
                return Reply(status=401, body="log in first", content_type="text/plain")
            return page(f"Internal {n}", f"Runbook {n}: restart the indexer.\n\nThen check queue {n}.")

        return handle

    for n in range(PAGES):
        stack.web.handle(f"{prefix}{n}", handler(n))
    return [stack.web.url(f"{prefix}{n}") for n in range(PAGES)]


def pipeline_with(stack: Stack, urls: list[str], credentials: Credentials) -> tuple[int, int]:
    """A pipeline over a connector of `urls` given `credentials` as the API gives them."""
    workspace_id, pipeline_id = stack.pipeline(urls)
    stack.change_connector(pipeline_id, ConnectorChanges(credentials=credentials), keyring=load_settings().keyring())
    return workspace_id, pipeline_id


def leaks(label: str, data: bytes | str) -> list[str]:
    data = data.encode() if isinstance(data, str) else data
    return [f"{label}: {secret.decode()}" for secret in SECRETS if secret in data]


def files_under(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield str(path), path.read_bytes()


def app_database(stack: Stack) -> Iterator[tuple[str, bytes]]:
    """Every row of every table, as text."""
    with stack.engine.connect() as connection:
        for table in sa.inspect(connection).get_table_names():
            for row in connection.execute(sa.text(f'SELECT * FROM "{table}"')):
                yield f"app database {table}", repr(tuple(row)).encode()


def test_a_run_with_credentials_crawls_the_site_and_leaves_them_nowhere(
    keyed: Stack,
    subscribe: Callable[[int], None],
    client_for,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
):
    stack = keyed
    caplog.set_level(logging.DEBUG)
    stack.web.route("/hook", Reply(status=204, content_type=None))
    several = Credentials(basic=(USER, PASSWORD), headers=[("X-Api-Key", API_KEY)], cookies=[("session", SESSION)])
    runs = {
        "several": pipeline_with(stack, behind_a_login(stack, "/basic/", "authorization", f"Basic {BASIC}"), several),
        "bearer": pipeline_with(
            stack, behind_a_login(stack, "/bearer/", "authorization", f"Bearer {TOKEN}"), Credentials(bearer=TOKEN)
        ),
    }
    workspaces = {name: workspace_id for name, (workspace_id, _) in runs.items()}
    for workspace_id in workspaces.values():
        subscribe(workspace_id)
    sensors = RunEndSensors(stack)

    run_ids: list[str] = []
    for workspace_id, pipeline_id in runs.values():
        for attempt in range(2):
            result = run_pipeline(stack, workspace_id, pipeline_id)
            assert result.success
            crawl = materialization(result, "crawl_results")
            assert crawl["urls_succeeded"] == PAGES
            assert crawl["urls_unchanged"] == (PAGES if attempt else 0)
            run_ids.append(result.run_id)
        documents = [document.content or "" for document in stack.documents(workspace_id)]
        assert len(documents) == PAGES and all("restart the indexer" in text for text in documents)
    sensors.tick()
    send_due(stack.sessions)

    found: list[str] = []
    client, tenants = tenants_of(stack, client_for, tmp_path / "api-data", workspaces)
    for name, (workspace_id, pipeline_id) in runs.items():
        tenant = tenants[name]
        base = f"/workspaces/{workspace_id}"
        routes = [f"{base}/connectors", f"{base}/pipelines", f"{base}/pipelines/{pipeline_id}"]
        routes += [f"{base}/pipelines/{pipeline_id}/runs", f"{base}/pipelines/{pipeline_id}/changes"]
        listed = client.get(f"{base}/connectors", headers=tenant.headers).json()["connectors"]
        routes += [f"{base}/connectors/{connector['id']}" for connector in listed]
        for run in client.get(f"{base}/pipelines/{pipeline_id}/runs", headers=tenant.headers).json()["runs"]:
            routes += [f"{base}/pipelines/{pipeline_id}/runs/{run['run_id']}"]
            routes += [f"{base}/pipelines/{pipeline_id}/runs/{run['run_id']}/result"]
        for route in routes:
            answer = client.get(route, headers=tenant.headers)
            assert answer.status_code == 200, (route, answer.text)
            found += leaks(f"GET {route}", answer.content)
        assert {connector["auth"]["bearer"] or connector["auth"]["basic"] for connector in listed} == {True}

    posted = [request for request in stack.web.requests if request.path == "/hook"]
    assert {request.headers["webhook-id"] for request in posted} and len(posted) >= 4
    found += [leak for request in posted for leak in leaks("notification", request.body)]
    found += leaks("log records", caplog.text)
    captured = capfd.readouterr()
    found += leaks("stdout", captured.out) + leaks("stderr", captured.err)
    found += [leak for path, data in files_under(Path(stack.instance.root_directory)) for leak in leaks(path, data)]
    for run_id in run_ids:
        run = stack.instance.get_run_by_id(run_id)
        assert run is not None
        found += leaks(f"run {run_id} tags and config", repr((run.tags, run.run_config)))
        found += leaks(f"run {run_id} events", repr(stack.instance.all_logs(run_id)))
    blob = stack.blob
    keys = [info.key for info in blob.list()]
    assert len(keys) >= len(run_ids)
    found += [leak for key in keys for leak in leaks(f"blob {key}", b"".join(blob.open_stream(key)))]
    found += [leak for table, row in app_database(stack) for leak in leaks(table, row)]
    assert found == []


def test_the_embedded_default_seals_them_in_its_key_file_and_a_wrong_key_refuses_the_run_losing_nothing(
    embedded: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.delenv("PIPELINES_SECRETS_KEY", raising=False)
    # The code location over tmp_path/data, as `make run` starts it: no key set.
    job = code_location_job(embedded, monkeypatch, tmp_path, billing=False)
    urls = behind_a_login(embedded, "/staging/", "authorization", f"Bearer {TOKEN}")
    workspace_id, pipeline_id = pipeline_with(embedded, urls, Credentials(bearer=TOKEN))
    key_file = tmp_path / "data" / "secrets.key"
    assert key_file.is_file()
    tags = {
        "dagster/partition": embedded.key(pipeline_id),
        **run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger="manual"),
    }

    with dg.execute_job(job, embedded.instance, tags=tags) as run:
        assert run.success
    requests = len(embedded.web.requests)

    right = key_file.read_bytes()
    write_key_file(key_file, [new_key()])
    with dg.execute_job(job, embedded.instance, tags=tags) as refused:
        assert not refused.success
        [failure] = [event for event in refused.all_events if event.is_step_failure]
        message = failure.step_failure_data.error.message
    assert f"cannot be opened with the keys of the key file {key_file}" in message
    assert "put back the key file it was sealed under" in message and "the run is not started" in message
    assert len(embedded.web.requests) == requests  # refused before any request

    key_file.write_bytes(right)
    with dg.execute_job(job, embedded.instance, tags=tags) as again:
        assert again.success
