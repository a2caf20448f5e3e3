"""Unique-constraint races on PostgreSQL, behind a real uvicorn server: requests that lose a race for a
pipeline name or a trigger get the answer a sequential duplicate gets, never a 500."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import uvicorn

from pipelines_dagster.api.app import create_app
from pipelines_dagster.app_db.engine import session_factory
from tests.api.conftest import free_port, new_tenant, settings_for


@pytest.fixture
def served(postgres_engine, instance, nowhere, tmp_path) -> Iterator[str]:
    """The API over PostgreSQL behind a real uvicorn server: requests race in its worker threads."""
    app = create_app(settings=settings_for(postgres_engine, tmp_path / "data"), instance=instance, launcher=nowhere)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def at_once(count: int, send: Any) -> list[httpx.Response]:
    """`count` requests sent together from their own threads and connections."""
    start = threading.Barrier(count)

    def one(_: int) -> httpx.Response:
        with httpx.Client(timeout=60) as http:
            start.wait()
            return send(http)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def statuses(responses: list[httpx.Response]) -> Counter[int]:
    return Counter(response.status_code for response in responses)


def test_parallel_creates_of_one_name_get_one_pipeline_and_the_duplicate_answer(served, postgres_engine):
    tenant = new_tenant(session_factory(postgres_engine))
    body = {"name": "racing", "connector_id": tenant.connector_id}
    answers = at_once(30, lambda http: http.post(f"{served}{tenant.pipelines}", headers=tenant.headers, json=body))
    assert statuses(answers) == {201: 1, 422: 29}, [a.text for a in answers if a.status_code not in {201, 422}]
    sequential = httpx.post(f"{served}{tenant.pipelines}", headers=tenant.headers, json=body)
    assert sequential.status_code == 422
    assert {a.text for a in answers if a.status_code == 422} == {sequential.text}
    listed = httpx.get(f"{served}{tenant.pipelines}", headers=tenant.headers).json()["pipelines"]
    assert [p["name"] for p in listed] == ["racing"]


def test_parallel_renames_to_one_name_leave_one_pipeline_with_it(served, postgres_engine):
    tenant = new_tenant(session_factory(postgres_engine))
    ids = [
        httpx.post(
            f"{served}{tenant.pipelines}",
            headers=tenant.headers,
            json={"name": f"p{n}", "connector_id": tenant.connector_id},
        ).json()["id"]
        for n in range(10)
    ]
    turns = iter(ids)
    lock = threading.Lock()

    def rename(http: httpx.Client) -> httpx.Response:
        with lock:
            pipeline_id = next(turns)
        return http.patch(f"{served}{tenant.pipelines}/{pipeline_id}", headers=tenant.headers, json={"name": "one"})

    answers = at_once(len(ids), rename)
    assert statuses(answers) == {200: 1, 422: 9}, [a.text for a in answers if a.status_code not in {200, 422}]


def test_parallel_duplicate_event_triggers_get_one_trigger_and_the_duplicate_answer(served, postgres_engine):
    tenant = new_tenant(session_factory(postgres_engine))
    made = httpx.post(
        f"{served}{tenant.pipelines}", headers=tenant.headers, json={"name": "p", "connector_id": tenant.connector_id}
    )
    triggers = f"{served}{tenant.pipelines}/{made.json()['id']}/triggers"
    body = {"kind": "event", "event_type": "refresh.requested"}
    answers = at_once(20, lambda http: http.post(triggers, headers=tenant.headers, json=body))
    assert statuses(answers) == {201: 1, 422: 19}, [a.text for a in answers if a.status_code not in {201, 422}]
    sequential = httpx.post(triggers, headers=tenant.headers, json=body)
    assert sequential.status_code == 422
    assert {a.text for a in answers if a.status_code == 422} == {sequential.text}
    kinds = [t["kind"] for t in httpx.get(triggers, headers=tenant.headers).json()["triggers"]]
    assert sorted(kinds) == ["event", "manual"]
