"""Alembic environment: run migrations on the connection the caller hands over."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from pipelines_dagster.app_db.engine import create_engine
from pipelines_dagster.app_db.models import Base

config = context.config


def _run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds tables instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None  # alembic_config() sets it
    with create_engine(url).connect() as conn:
        _run(conn)
