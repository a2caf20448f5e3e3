"""What every command group shares: the id type and `--json`, the output, the one translation of user errors
into a one-line message, and how a command opens the app database."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import create_engine, session_factory
from pipelines_dagster.app_db.migrate import DatabaseNotReadyError, current_engine
from pipelines_dagster.core.errors import InvalidInputError, UserError
from pipelines_dagster.core.validation import MAX_ID
from pipelines_dagster.settings import Settings

# A row id, refused by click when no row can have it: a larger integer would overflow the id columns.
ID = click.IntRange(1, MAX_ID)

json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of text.")

# The catalog names fields as the HTTP API does; these are the options that set them here.
OPTION_OF_FIELD = {
    "connector_id": "connector",
    "urls": "url",
    "schedule.cron": "cron",
    "schedule.timezone": "timezone",
    "schedule.every_minutes": "every_minutes",
    "retry_policy.backoff": "retry_backoff",
    "retry_policy.max_retries": "retry_max",
    "retry_policy.delay_seconds": "retry_delay",
    "max_runtime_seconds": "max_runtime",
    "event_types": "event",
    "pipeline_ids": "pipeline",
    "credits_below_micros": "credits_below",
}


def user_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn errors a user can fix into a one-line message and a non-zero exit: every `UserError` of the domain
    (bad input named by its option), a database not migrated yet, and a database that cannot be reached."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InvalidInputError as exc:
            option = OPTION_OF_FIELD.get(exc.field, exc.field).replace("_", "-")
            raise click.ClickException(f"--{option}: {exc.message}") from None
        except (UserError, DatabaseNotReadyError) as exc:
            raise click.ClickException(str(exc)) from None
        except sa.exc.OperationalError as exc:
            raise click.ClickException(f"cannot reach the app database: {exc.orig}") from None
        except sa.exc.IntegrityError:
            # A duplicate is refused by its check, also when a concurrent command committed it first; what
            # lands here lost another race with a concurrent change.
            raise click.ClickException("a concurrent change touched what this command writes; run it again") from None

    return wrapper


def emit(as_json: bool, shown: BaseModel, text: str) -> None:
    """`--json`: the model as the API serializes it (every command prints an API response model); else `text`."""
    click.echo(json.dumps(shown.model_dump(mode="json")) if as_json else text)


def open_engine(settings: Settings, *, migrated: bool = True) -> sa.Engine:
    """The app database's engine; `migrated=False` for the commands that migrate it themselves (and may create
    the deployment)."""
    if migrated:
        settings.require_deployment()
    return current_engine(settings.resolved_database_url) if migrated else create_engine(settings.resolved_database_url)


def open_sessions(settings: Settings) -> sessionmaker[Session]:
    return session_factory(open_engine(settings))


def workspace_ref(argument: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--workspace ID <ARGUMENT>`: pipelines and notification endpoints are always named within their workspace."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.argument(argument, type=ID)(command)
        return click.option("--workspace", "workspace_id", required=True, type=ID)(command)

    return decorate


pipeline_ref = workspace_ref("pipeline_id")
endpoint_ref = workspace_ref("endpoint_id")


def plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"
