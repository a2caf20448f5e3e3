"""The `pipelines-dagster` command: the root group, which loads a command group's module only when it runs."""

from __future__ import annotations

import importlib

import click

# Command name → "module:attribute" under pipelines_dagster.cli. A command imports only its own module, so one
# that needs no Dagster, web stack or HTTP client starts without loading them.
COMMANDS = {
    "api": "serve:api",
    "connector": "connector:connector",
    "costs": "credits:costs",
    "credits": "credits:credits",
    "db": "db:db",
    "demo": "demo:demo",
    "event": "trigger:event",
    "mcp": "serve:mcp",
    "notification": "notification:notification",
    "pipeline": "pipeline:pipeline",
    "runs": "runs:runs",
    "secrets": "secrets:secrets",
    "templates": "workspace:templates",
    "token": "token:token",
    "trigger": "trigger:trigger",
    "worker": "worker:worker",
    "workspace": "workspace:workspace",
}


class CommandGroups(click.Group):
    """The root group: `COMMANDS` listed by name, each imported when it is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name].split(":")
        command: click.Command = getattr(importlib.import_module(f"pipelines_dagster.cli.{module}"), attribute)
        return command


# -h on every command: a context takes its parent's help option names.
@click.group(cls=CommandGroups, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pipelines-dagster", prog_name="pipelines-dagster")
def main() -> None:
    """Web-crawl pipelines for a knowledge base, orchestrated by Dagster."""
