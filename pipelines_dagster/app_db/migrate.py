"""Apply and check the app database's Alembic migrations."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from pipelines_dagster.app_db.engine import create_engine

# Alembic (with Mako and Pygments, a tenth of a second) is imported by what migrates: every command checks
# that the schema is current, and that check needs only the revision files' names and one table.
if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSIONS_DIR = MIGRATIONS_DIR / "versions"
# Where Alembic records the revision a database is at (its default name, which env.py keeps).
VERSION_TABLE = "alembic_version"


class DatabaseNotReadyError(RuntimeError):
    """The app database is missing migrations."""


def alembic_config(engine: sa.Engine) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return config


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    from alembic import command

    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def head_revision() -> str | None:
    """The newest revision: each migration is named `NNNN_what.py` after its revision and revises the one numbered
    before it (tests/app_db/test_schema.py holds this against Alembic's own graph); None without migrations."""
    revisions = sorted(path.name.partition("_")[0] for path in VERSIONS_DIR.glob("[0-9]*_*.py"))
    return revisions[-1] if revisions else None


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at; None before its first migration."""
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table(VERSION_TABLE):
            return None
        version = sa.table(VERSION_TABLE, sa.column("version_num"))
        revision: str | None = connection.scalar(sa.select(version.c.version_num))
        return revision


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
