"""An empty app database of each backend, for the tests that migrate one step by step."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from pipelines_dagster.app_db.engine import create_engine


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database(request, tmp_path) -> Iterator[sa.Engine]:
    """A new app database of the backend with no tables yet; a PostgreSQL one is dropped afterwards."""
    if request.param == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path / 'old.sqlite3'}")
        yield engine
        engine.dispose()
        return
    postgres_url = request.getfixturevalue("postgres_url")
    admin = sa.create_engine(
        sa.make_url(postgres_url).set(drivername="postgresql+psycopg2"), isolation_level="AUTOCOMMIT"
    )
    name = f"pd_step_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine = create_engine(sa.make_url(postgres_url).set(database=name).render_as_string(hide_password=False))
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()
