"""Engines and sessions for the app database, the same on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.dialects import postgresql, sqlite


def create_engine(url: str) -> sa.Engine:
    """An engine with the settings every caller needs (SQLite: FKs on, WAL, busy wait)."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30})
        sa.event.listen(engine, "connect", _sqlite_on_connect)
        # pysqlite's own BEGIN handling defers locks; issue BEGIN ourselves so a
        # read-then-write transaction cannot deadlock another writer.
        sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        return engine
    if parsed.drivername in {"postgres", "postgresql"}:
        # One PostgreSQL driver for us and dagster-postgres: psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return sa.create_engine(parsed, pool_pre_ping=True)


def _sqlite_on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def session_factory(engine: sa.Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back everything on any error."""
    with factory() as session, session.begin():
        yield session


def dialect_insert(
    bind: sa.Engine | sa.Connection | Session, table: sa.Table | type
) -> postgresql.Insert | sqlite.Insert:
    """INSERT with ON CONFLICT support for the bind's backend (SQLite and PostgreSQL share the API)."""
    from sqlalchemy.dialects import postgresql, sqlite

    name = (bind.get_bind() if isinstance(bind, Session) else bind).dialect.name
    return (postgresql.insert if name == "postgresql" else sqlite.insert)(table)
