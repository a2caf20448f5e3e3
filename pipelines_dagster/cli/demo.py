"""`pipelines-dagster demo`: the example docs site seeded as a workspace and crawled, headless or with the
Dagster UI."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from typing import Any

import click

from pipelines_dagster.app_db.engine import session_factory
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.cli.common import open_engine, user_errors
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import (
    CHECKOUT_DIR,
    DAGSTER_URL_ENV,
    DEFAULT_SITE_PORT,
    DEFAULT_UI_PORT,
    ENV_PREFIX,
    Settings,
    load_settings,
)

PORT = click.IntRange(1, 65535)
# `dagster dev` says it is superseded by `dg dev`, which needs the dev extra `make run` does not install; the
# command still works as documented, so its process alone is told not to print that. By message: a -W category
# must be importable before site-packages is on the path.
QUIET_DAGSTER_DEV = "ignore:Function `dev_command` is superseded"


@click.command()
@click.option("--once", is_flag=True, help="Crawl the demo site headless, print a JSON summary, exit.")
@click.option(
    "--site-port",
    type=PORT,
    default=None,
    help=f"Loopback port for the demo site [${ENV_PREFIX}SITE_PORT, else {DEFAULT_SITE_PORT}]. A demo on another "
    "port has a pipeline of its own.",
)
@click.option(
    "--ui-port", type=PORT, default=None, help=f"Port of the Dagster UI [${ENV_PREFIX}UI_PORT, else {DEFAULT_UI_PORT}]."
)
@user_errors
def demo(once: bool, site_port: int | None, ui_port: int | None) -> None:
    """Seed a demo workspace over the example docs site, served on 127.0.0.1.

    Without --once, keeps the site up and starts `dagster dev` (UI and daemon) on
    the embedded default, so the demo partition can be materialized from the UI.
    A port already taken stops the demo before anything starts, naming it.
    """
    from pipelines_dagster import demo as demo_site

    settings = load_settings()
    site_port = site_port or settings.site_port
    ui_port = ui_port or settings.ui_port
    try:
        _demo(demo_site, settings, once=once, site_port=site_port, ui_port=ui_port)
    except (demo_site.DemoSiteMissingError, demo_site.SitePortBusyError) as exc:
        raise click.ClickException(str(exc)) from None


def _demo(demo_site: Any, settings: Settings, *, once: bool, site_port: int, ui_port: int) -> None:
    if CHECKOUT_DIR is None:
        raise click.ClickException(
            "the demo runs from a checkout of the repo (`make run`), not from an installed wheel"
        )
    if not once:
        _require_free(ui_port)
    engine = open_engine(settings, migrated=False)
    upgrade(engine)
    # The config is in place before the instance is opened, so Dagster neither warns nor runs on its bare defaults.
    instance = dagster_instance(settings, embedded_config=True)
    sessions = session_factory(engine)
    if once:
        click.echo(json.dumps(demo_site.run_once(settings, sessions, instance, site_port=site_port), indent=2))
        return
    with demo_site.serve_site(port=site_port) as base_url:
        seeded = demo_site.seed(sessions, instance, site_port=site_port)
        click.echo(f"demo site: {base_url}  (pipeline {seeded.pipeline_id}, workspace {seeded.workspace_id})")
        if seeded.api_token:
            click.echo(f"API token of the demo workspace (shown once): {seeded.api_token}")
        click.echo(f"another API token, any time: {demo_site.new_token_command(seeded.workspace_id)}")
        click.echo(
            f"Dagster UI: http://127.0.0.1:{ui_port} — Catalog → crawl_results → Materialize…, "
            f"partition {seeded.partition_key}"
        )
        allowed = demo_site.with_loopback_allowed(settings).crawler_allowed_networks
        env = {
            # Run links and run-now follow the UI to its port, unless the environment names the webserver.
            DAGSTER_URL_ENV: f"http://127.0.0.1:{ui_port}",
            **os.environ,
            "PIPELINES_CRAWLER_ALLOWED_NETWORKS": allowed,
            "DAGSTER_HOME": instance.root_directory,
        }
        command = [sys.executable, "-W", QUIET_DAGSTER_DEV, "-m", "dagster", "dev"]
        command += ["-w", str(CHECKOUT_DIR / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(ui_port)]
        with contextlib.suppress(KeyboardInterrupt):
            subprocess.run(command, env=env, cwd=CHECKOUT_DIR, check=False)


def _require_free(port: int) -> None:
    """Stop before anything starts when the UI's port is taken: `dagster dev` would fail its webserver there and
    keep its daemon running."""
    with socket.socket() as probe:
        # As the webserver binds: a port left in TIME_WAIT by a server that just stopped is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve the Dagster UI on 127.0.0.1:{port} ({exc.strerror}); pass another --ui-port "
                "(or UI_PORT=... to make run)"
            ) from None
