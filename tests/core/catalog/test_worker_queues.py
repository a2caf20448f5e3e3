"""A pipeline's own worker queue: names a Celery worker can take, set, kept, cleared, and read for many pipelines
at once as the run launcher reads them."""

from __future__ import annotations

import pytest

from pipelines_dagster.app_db.engine import transaction
from pipelines_dagster.core.catalog.pipelines import create_pipeline, pipeline_queues
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import validate_queue_name
from tests.core.catalog.test_catalog import (  # noqa: F401  (fixture)
    NOW,
    refused,
    snapshot,
    update,
    user_pipeline,
    workspace_and_connector,
)
from tests.support.db import row_counts
from tests.test_history import counted_queries


@pytest.mark.parametrize("name", ["pipelines", "site-crawls", "heavy.eu_1", "Q", "x" * 64, "amq"])
def test_a_queue_name_celery_and_rabbitmq_take_is_accepted_as_given(name: str):
    assert validate_queue_name(name) == name


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("", "1 to 64 letters"),
        ("x" * 65, "1 to 64 letters"),
        ("a,b", "without commas"),
        (" heavy", "no spaces"),
        ("heavy\n", "no spaces"),
        ("two words", "no spaces"),
        ("crawls/eu", "letters, digits, '.', '_' or '-'"),
        ("kø", "letters, digits"),
        (7, "is not a queue name"),
        ("amq.gen-1", "RabbitMQ's own; choose another"),
    ],
)
def test_a_name_no_worker_could_take_is_refused_saying_what_to_give(name: object, fix: str):
    with pytest.raises(InvalidInputError) as caught:
        validate_queue_name(name)
    assert caught.value.field == "worker_queue" and fix in caught.value.message, caught.value.message


def test_a_queue_is_set_at_creation_kept_by_other_changes_changed_and_cleared(sessions, workspace_and_connector):
    workspace_id, connector_id = workspace_and_connector
    heavy = user_pipeline(sessions, workspace_id, connector_id, "site", worker_queue="site-crawls")
    plain = user_pipeline(sessions, workspace_id, connector_id, "plain")
    assert (snapshot(sessions, heavy)["worker_queue"], snapshot(sessions, plain)["worker_queue"]) == (
        "site-crawls",
        None,
    )
    update(sessions, workspace_id, heavy, name="whole site")
    assert snapshot(sessions, heavy)["worker_queue"] == "site-crawls"
    assert refused(sessions, workspace_id, heavy, worker_queue="amq.direct", name="other").field == "worker_queue"
    update(sessions, workspace_id, heavy, worker_queue="bulk")
    assert snapshot(sessions, heavy)["worker_queue"] == "bulk"
    update(sessions, workspace_id, heavy, worker_queue=None)
    assert snapshot(sessions, heavy)["worker_queue"] is None


def test_a_bad_queue_at_creation_writes_nothing(app_engine, sessions, workspace_and_connector):
    workspace_id, connector_id = workspace_and_connector
    before = row_counts(app_engine)
    with pytest.raises(InvalidInputError, match="is not a queue name"), transaction(sessions) as session:
        create_pipeline(session, workspace_id=workspace_id, connector_id=connector_id, name="p", worker_queue="a b")
    assert row_counts(app_engine) == before


def test_the_launchers_read_gives_the_set_queues_of_many_pipelines_in_one_query(sessions, workspace_and_connector):
    workspace_id, connector_id = workspace_and_connector
    ids = [user_pipeline(sessions, workspace_id, connector_id, f"p{n}") for n in range(4)]
    update(sessions, workspace_id, ids[0], worker_queue="site-crawls")
    update(sessions, workspace_id, ids[2], worker_queue="bulk")
    with sessions() as session, counted_queries() as counts:
        queues = pipeline_queues(session, [*ids, ids[0], 999_999])
    # Without a queue of its own, or gone: absent, so its run takes the launcher's default queue.
    assert queues == {ids[0]: "site-crawls", ids[2]: "bulk"}
    assert sum(counts.values()) == 1
    with sessions() as session, counted_queries() as counts:
        assert pipeline_queues(session, []) == {}
    assert sum(counts.values()) == 0
