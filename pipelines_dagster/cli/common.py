"""What every command group shares: the id type and `--json`, how a pipeline, connector or endpoint is named
(`--workspace W --pipeline P`), the old spellings of renamed options, the output, the one translation of user
errors into a one-line message, and how a command opens the app database."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
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

# The catalog names fields as the HTTP API does, and an option is spelled as its field; these are the options
# named otherwise: a nested field by its own name, a list by one of its items (repeated), an id by its noun.
OPTION_OF_FIELD = {
    "connector_id": "connector",
    "urls": "url",
    "site": "start_url",
    "schedule.cron": "cron",
    "schedule.timezone": "timezone",
    "schedule.every_minutes": "every_minutes",
    "retry_policy.backoff": "backoff",
    "retry_policy.max_retries": "max_retries",
    "retry_policy.delay_seconds": "delay_seconds",
    "event_types": "event_type",
    "pipeline_ids": "pipeline",
    "auth": "auth_basic, --auth-bearer, --header or --cookie",
    "auth.basic": "auth_basic",
    "auth.bearer": "auth_bearer",
    "auth.headers": "header",
    "auth.cookies": "cookie",
    "owned_hosts": "owned_host",
}


class RenamedOption(click.Option):
    """An option whose old spelling (`formerly`) still works in users' scripts, unlisted in the help; a command
    of `Command` takes it and says on stderr what to write instead."""

    def __init__(self, *args: Any, formerly: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.formerly = formerly


class Command(click.Command):
    """A command that reads the old spellings of its renamed options as the new ones, with a one-line notice."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        renamed = {param.formerly: param.opts[0] for param in self.params if isinstance(param, RenamedOption)}
        return super().parse_args(ctx, respelled(args, renamed))


def respelled(args: Sequence[str], renamed: dict[str, str]) -> list[str]:
    """`args` with every old option spelling (`--old` or `--old=value`) replaced, up to a `--`."""
    out: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return out + list(args[index:])
        old, equals, value = arg.partition("=")
        if old in renamed:
            click.echo(f"{old} is deprecated: use {renamed[old]}", err=True)
            arg = f"{renamed[old]}{equals}{value}"
        out.append(arg)
    return out


class Group(click.Group):
    """A command group whose commands take their renamed options' old spellings."""

    command_class = Command


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


class NamingOption(click.Option):
    """`--<noun>` where a former positional id may stand in for it: required all the same, and so shown in the
    help, though checked by the command rather than by click."""

    def get_help_extra(self, ctx: click.Context) -> Any:
        return {**super().get_help_extra(ctx), "required": "required"}


class FormerArgument(click.Argument):
    """The positional id a command took before `--<noun>`: still read, left out of the usage line."""

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return []


def workspace_ref(noun: str, *, former_argument: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--workspace W --<noun> ID`: pipelines, connectors and notification endpoints are always named within
    their workspace. With `former_argument`, the id as a positional argument (the old shape) works too, with a
    one-line notice on stderr."""
    name = f"{noun}_id"
    workspace = click.option("--workspace", "workspace_id", required=True, type=ID)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        if not former_argument:
            return workspace(click.option(f"--{noun}", name, required=True, type=ID)(command))

        @functools.wraps(command)
        def named(*args: Any, **kwargs: Any) -> Any:
            former = kwargs.pop(f"former_{name}", None)
            if former is not None and kwargs[name] is not None:
                raise click.UsageError(f"give the {noun} once, as --{noun}")
            if former is not None:
                click.echo(f"the {noun} id as an argument is deprecated: use --{noun} {former}", err=True)
                kwargs[name] = former
            if kwargs[name] is None:
                raise click.UsageError(f"Missing option '--{noun}'.")
            return command(*args, **kwargs)

        named = click.argument(f"former_{name}", cls=FormerArgument, required=False, type=ID)(named)
        return workspace(click.option(f"--{noun}", name, cls=NamingOption, type=ID, default=None)(named))

    return decorate


pipeline_ref = workspace_ref("pipeline")
endpoint_ref = workspace_ref("endpoint")
connector_ref = workspace_ref("connector", former_argument=False)


def plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"
