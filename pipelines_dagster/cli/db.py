"""`pipelines-dagster db`: the app database's schema."""

from __future__ import annotations

import click

from pipelines_dagster.api.schemas.database import DatabaseOut
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.cli.common import emit, json_option, open_engine, user_errors
from pipelines_dagster.settings import load_settings


@click.group()
def db() -> None:
    """The app database."""


@db.command("upgrade")
@json_option
@user_errors
def db_upgrade(as_json: bool) -> None:
    """Create or migrate the app database to the latest schema."""
    settings = load_settings()
    engine = open_engine(settings, migrated=False)
    upgrade(engine)
    url = engine.url.render_as_string(hide_password=True)
    emit(as_json, DatabaseOut(database=url, status="current"), f"app database is current: {url}")
