"""Apply and check the app database's Alembic migrations."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from pipelines_dagster.app_db.engine import create_engine

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


class DatabaseNotReadyError(RuntimeError):
    """The app database is missing migrations."""


def alembic_config(engine: sa.Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return config


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def head_revision() -> str | None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(config).get_current_head()


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def require_current(engine: sa.Engine) -> None:
    """Fail with what to run when the database is behind the code."""
    current = current_revision(engine)
    if current != head_revision():
        state = "has no tables yet" if current is None else f"is at revision {current}"
        raise DatabaseNotReadyError(f"the app database {state}; run `pipelines-dagster db upgrade` first")


def current_engine(url: str) -> sa.Engine:
    """An engine on the app database at `url`, refused with what to run unless its schema is the code's: how each
    process that serves or changes it (the CLI, the API, the MCP server) opens it."""
    engine = create_engine(url)
    require_current(engine)
    return engine
