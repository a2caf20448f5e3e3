"""Fixtures for the real services integration tests talk to.

A service that is absent skips its tests locally with the reason; under
CI=true it fails them, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
import signal
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import create_engine, session_factory
from pipelines_dagster.app_db.migrate import upgrade

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
POSTGRES_ADMIN_URL = os.environ.get("PIPELINES_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("PIPELINES_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BROKER_URL = os.environ.get("PIPELINES_TEST_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")


def missing(message: str) -> None:
    """Skip locally with the reason; under CI=true, fail: CI provides every part a test needs."""
    if IN_CI:
        pytest.fail(f"{message}; CI=true requires it", pytrace=False)
    pytest.skip(message)


def service_missing(what: str, why: object) -> None:
    missing(f"{what} is not reachable ({why})")


def _reachable(url: str, default_port: int) -> str | None:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), 2):
            return None
    except OSError as exc:
        return str(exc)


# The longest test files and about how many seconds each takes under CI (3 workers on 2 cores; estimated from CI's
# slowest tests, rounded). `--dist loadfile` runs a file whole on one worker, so these are handed out first: a
# worker left running a minutes-long file alone at the end lengthens the suite. A file not named here takes less
# than the last one named; a new minutes-long file belongs here.
SLOWEST_FILES = {
    "tests/test_e2e_triggers.py": 260,
    "tests/test_e2e_celery.py": 200,
    "tests/test_e2e_launch_paths.py": 200,
    "tests/test_e2e_run_crash.py": 145,
    "tests/test_e2e_browser.py": 135,
    "tests/assets/test_credit_holds.py": 100,
    "tests/test_e2e_progress.py": 80,
    "tests/core/crawl/render/test_browser.py": 70,
    "tests/assets/test_crawl_health.py": 150,
    "tests/api/test_openapi.py": 100,
    "tests/assets/test_lock_loss.py": 60,
    "tests/assets/test_rendering.py": 45,
    "tests/assets/test_credentials.py": 45,
    "tests/core/crawl/render/test_crawl_rendering.py": 40,
    "tests/sensors/test_no_lost_triggers.py": 50,
    "tests/test_quiet.py": 50,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files longest first: those in SLOWEST_FILES by their seconds, then the rest by their number of tests (the
    order xdist would give them; pyproject.toml's --no-loadscope-reorder keeps xdist from re-sorting them all so,
    which put the few-test, minutes-long end-to-end files last)."""
    if gone := [name for name in SLOWEST_FILES if not (config.rootpath / name).is_file()]:
        raise pytest.UsageError(
            f"tests/conftest.py's SLOWEST_FILES names {', '.join(gone)}, which no longer exist: rename or remove them"
        )
    tests_in = Counter(item.path for item in items)

    def longest_first(item: pytest.Item) -> tuple[int, int]:
        name = item.path.relative_to(config.rootpath).as_posix()
        return -SLOWEST_FILES.get(name, 0), -tests_in[item.path]

    items.sort(key=longest_first)


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT as a foreground process has it, when this one was started as a background job with SIGINT ignored.

    Dagster maps SIGTERM to SIGINT's handler when it runs a job in a process's main thread: an ignored SIGINT
    would leave SIGTERM ignored, and every process started afterwards inherits that, Dagster's compute-log `tail`
    and the tests' `dagster dev` deployments among them. An in-process run then waits 2 x 30 s at its end for
    `tail`s a terminate cannot stop, and fails (CI saw in-process runs take a minute longer than alone, and one
    test fail on it). A Python handler is not inherited: each process started gets the default.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test session, dropped afterwards."""
    if (why := _reachable(POSTGRES_ADMIN_URL, 5432)) is not None:
        service_missing("PostgreSQL", why)
    name = f"pd_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(
        sa.make_url(POSTGRES_ADMIN_URL).set(drivername="postgresql+psycopg2"),
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    upgrade(engine)
    engine.dispose()
    yield url
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@contextmanager
def database_beside(url: str, label: str) -> Iterator[str]:
    """A new database on `url`'s PostgreSQL server, named after `url`'s and `label`, dropped afterwards: its URL,
    with the psycopg2 driver named (a bare postgresql:// is psycopg 3 to SQLAlchemy 2.1, and not installed)."""
    server = sa.make_url(url).set(drivername="postgresql+psycopg2")
    name = f"{server.database}_{label}_{uuid.uuid4().hex[:6]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = create_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sqlite_engine(tmp_path) -> Iterator[sa.Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'app.sqlite3'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def app_engine(request) -> sa.Engine:
    """The app database on each backend we support, migrated to head."""
    return request.getfixturevalue(f"{request.param}_engine")


@pytest.fixture
def sessions(app_engine: sa.Engine) -> sessionmaker[Session]:
    return session_factory(app_engine)


@pytest.fixture(scope="session")
def redis_url() -> str:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("Redis", exc)
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture(scope="session")
def broker_url() -> str:
    """The Celery broker (RabbitMQ), once it has answered a connection with its credentials."""
    from kombu import Connection

    try:
        with Connection(BROKER_URL, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as exc:  # kombu raises the transport's own errors, OSError among them
        service_missing("the Celery broker (RabbitMQ)", exc)
    return BROKER_URL


@pytest.fixture(scope="session")
def s3_endpoint_url() -> Iterator[str]:
    """The moto S3 server: the one .ci/run started, or one started here on loopback."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    given = os.environ.get("PIPELINES_TEST_S3_ENDPOINT_URL")
    if given:
        if (why := _reachable(given, 80)) is not None:
            service_missing(f"the S3 server at {given}", why)
        yield given
        return
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint_url: str) -> str:
    import boto3

    name = f"pd-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint_url).create_bucket(Bucket=name)
    return name
