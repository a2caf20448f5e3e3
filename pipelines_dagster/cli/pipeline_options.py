"""The options that set a pipeline's schedule, retry policy, maximum runtime and worker queue, which
`pipeline create` and `pipeline update` share, and what an option left out of an update means."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from pipelines_dagster.cli.common import RenamedOption
from pipelines_dagster.core.catalog.changes import KEEP, Keep
from pipelines_dagster.core.catalog.retry import (
    DEFAULT_BACKOFF,
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_RETRIES,
    MAX_RETRIES,
    RetryPolicy,
    validate_retry_policy,
)
from pipelines_dagster.core.catalog.schedules import ScheduleSpec
from pipelines_dagster.core.errors import InvalidInputError

T = TypeVar("T")


def schedule_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--cron", default=None, help="Cron expression, five fields; needs --timezone."),
            click.option("--timezone", default=None, help="IANA timezone of --cron, e.g. Europe/Stockholm."),
            click.option("--every-minutes", type=int, default=None, help="Run every N minutes instead of a cron."),
        ]
    ):
        command = option(command)
    return command


def schedule_of(cron: str | None, timezone: str | None, every_minutes: int | None) -> ScheduleSpec | None:
    if cron is None and timezone is None and every_minutes is None:
        return None
    return ScheduleSpec(cron=cron, timezone=timezone, every_minutes=every_minutes)


def retry_options(*, defaults: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--backoff/--max-retries/--delay-seconds`, the fields of the API's `retry_policy` (formerly
    `--retry-backoff/--retry-max/--retry-delay`); without defaults an option left out is None."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(
            [
                click.option(
                    "--backoff",
                    cls=RenamedOption,
                    formerly="--retry-backoff",
                    default=DEFAULT_BACKOFF.value if defaults else None,
                    show_default=defaults,
                    help="How a failed crawl is retried: linear or exponential.",
                ),
                click.option(
                    "--max-retries",
                    cls=RenamedOption,
                    formerly="--retry-max",
                    default=DEFAULT_MAX_RETRIES if defaults else None,
                    show_default=defaults,
                    type=int,
                    help=f"Retries of a failed crawl, 0 to {MAX_RETRIES}.",
                ),
                click.option(
                    "--delay-seconds",
                    cls=RenamedOption,
                    formerly="--retry-delay",
                    default=DEFAULT_DELAY_SECONDS if defaults else None,
                    show_default=defaults,
                    type=float,
                    help="Seconds before the first retry; linear adds it per retry, exponential doubles it.",
                ),
            ]
        ):
            command = option(command)
        return command

    return decorate


def retry_of(backoff: str | None, max_retries: int | None, delay_seconds: float | None) -> RetryPolicy | None:
    """The policy the options give, as a whole: an option left out takes its default, as in the API."""
    if backoff is None and max_retries is None and delay_seconds is None:
        return None
    return validate_retry_policy(
        backoff=DEFAULT_BACKOFF.value if backoff is None else backoff,
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
        delay_seconds=DEFAULT_DELAY_SECONDS if delay_seconds is None else delay_seconds,
    )


max_runtime_option = click.option(
    "--max-runtime-seconds",
    cls=RenamedOption,
    formerly="--max-runtime",
    type=int,
    default=None,
    help="Seconds one run may take (10 to 604800); a crawl past it is continued by a new run from the pages "
    "it stored. Default: the deployment's maximum runtime.",
)

# Spelled as the API field; `--queue` as the worker's option that takes the queue.
worker_queue_option = click.option(
    "--worker-queue",
    "--queue",
    "worker_queue",
    metavar="NAME",
    default=None,
    help="The Celery queue its runs go to under the Celery profile, taken by `pipelines-dagster worker --queue "
    "NAME`. Default: the run launcher's default queue.",
)


def keep(value: T | None) -> T | Keep:
    """An update option left out keeps the pipeline's value."""
    return KEEP if value is None else value


def refuse_both(flag: str, clear: bool, given: bool, options: str) -> None:
    if clear and given:
        raise InvalidInputError(flag, f"give {options} or --{flag.replace('_', '-')}, not both")
