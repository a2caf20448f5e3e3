"""Engines and sessions for the app database, the same on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

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


_AFTER_COMMIT = "after_commit"


def after_commit(session: Session, action: Callable[[], object]) -> None:
    """Run `action` once the session's transaction commits; never if the part of it `action` was
    registered in rolls back.

    For what lives outside the database and stands for rows in it (a Dagster partition): done after the
    commit, a kill in between leaves it missing, never standing for rows that were not committed.
    An action that raises does so from the commit, which has happened.
    """
    if _AFTER_COMMIT not in session.info:
        session.info[_AFTER_COMMIT] = []
        sa.event.listen(session, "after_commit", _run_after_commit)
        sa.event.listen(session, "after_soft_rollback", _drop_rolled_back)
    # The innermost transaction: a savepoint rolled back drops the actions registered inside it.
    session.info[_AFTER_COMMIT].append((session.get_nested_transaction() or session.get_transaction(), action))


def _run_after_commit(session: Session) -> None:
    # Releasing a savepoint fires after_commit too; only the outermost transaction's commit counts.
    if session.get_nested_transaction() is not None:
        return
    pending, session.info[_AFTER_COMMIT] = session.info[_AFTER_COMMIT], []
    for _, action in pending:
        action()


def _drop_rolled_back(session: Session, rolled_back: SessionTransaction) -> None:
    session.info[_AFTER_COMMIT] = [
        (registered, action)
        for registered, action in session.info[_AFTER_COMMIT]
        if not _within(registered, rolled_back)
    ]


def _within(transaction: SessionTransaction | None, outer: SessionTransaction) -> bool:
    while transaction is not None:
        if transaction is outer:
            return True
        transaction = transaction.parent
    return False


def dialect_insert(
    bind: sa.Engine | sa.Connection | Session, table: sa.Table | type
) -> postgresql.Insert | sqlite.Insert:
    """INSERT with ON CONFLICT support for the bind's backend (SQLite and PostgreSQL share the API)."""
    from sqlalchemy.dialects import postgresql, sqlite

    name = (bind.get_bind() if isinstance(bind, Session) else bind).dialect.name
    return (postgresql.insert if name == "postgresql" else sqlite.insert)(table)


@contextmanager
def refused_as_sequential(session: Session, check: Callable[[], object]) -> Iterator[None]:
    """Write what the block adds or changes under a unique constraint that `check` (already passed) guards.

    A concurrent transaction may commit the same key between the check and the write: PostgreSQL makes the
    write wait for that commit, then fails it. The write runs in a savepoint, so the transaction lives on, and
    `check` is run again: it sees that commit now and refuses the write with the answer a sequential duplicate
    gets. An integrity error `check` does not explain is raised as it is.
    """
    try:
        with session.begin_nested():
            yield
            session.flush()
    except sa.exc.IntegrityError:
        check()
        raise
