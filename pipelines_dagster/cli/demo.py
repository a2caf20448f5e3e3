"""`pipelines-dagster demo`: the example docs site seeded as a workspace and crawled, headless or with the
Dagster UI."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from pipelines_dagster.app_db.engine import session_factory
from pipelines_dagster.app_db.migrate import upgrade
from pipelines_dagster.cli.common import open_engine, user_errors
from pipelines_dagster.instance import dagster_instance
from pipelines_dagster.settings import load_settings

# The checkout: deploy/dagster.yaml and workspace.yaml, which `dagster dev` reads.
REPO_DIR = Path(__file__).resolve().parents[2]


@click.command()
@click.option("--once", is_flag=True, help="Crawl the demo site headless, print a JSON summary, exit.")
@click.option("--site-port", default=8765, show_default=True, help="Loopback port for the demo site.")
@click.option("--ui-port", default=3000, show_default=True, help="Port of the Dagster UI.")
@user_errors
def demo(once: bool, site_port: int, ui_port: int) -> None:
    """Seed a demo workspace over the example docs site, served on 127.0.0.1.

    Without --once, keeps the site up and starts `dagster dev` (UI and daemon) on
    the embedded default, so the demo partition can be materialized from the UI.
    """
    from pipelines_dagster import demo as demo_site

    try:
        _demo(demo_site, once=once, site_port=site_port, ui_port=ui_port)
    except (demo_site.DemoSiteMissingError, demo_site.SitePortBusyError) as exc:
        raise click.ClickException(str(exc)) from None


def _demo(demo_site: Any, *, once: bool, site_port: int, ui_port: int) -> None:
    settings = load_settings()
    engine = open_engine(settings, migrated=False)
    upgrade(engine)
    instance = dagster_instance(settings)
    sessions = session_factory(engine)
    if once:
        click.echo(json.dumps(demo_site.run_once(settings, sessions, instance, site_port=site_port), indent=2))
        return
    home = Path(instance.root_directory)
    if not (home / "dagster.yaml").exists():
        shutil.copy(REPO_DIR / "deploy" / "dagster.yaml", home / "dagster.yaml")
    with demo_site.serve_site(port=site_port) as base_url:
        seeded = demo_site.seed(sessions, instance, base_url)
        click.echo(f"demo site: {base_url}  (pipeline {seeded.pipeline_id}, workspace {seeded.workspace_id})")
        if seeded.api_token:
            click.echo(f"API token of the demo workspace (shown once): {seeded.api_token}")
        click.echo(f"another API token, any time: {demo_site.new_token_command(seeded.workspace_id)}")
        click.echo(
            f"Dagster UI: http://127.0.0.1:{ui_port} — Assets → crawl_results → Materialize, "
            f"partition {seeded.pipeline_id}"
        )
        allowed = demo_site.with_loopback_allowed(settings).crawler_allowed_networks
        env = {**os.environ, "PIPELINES_CRAWLER_ALLOWED_NETWORKS": allowed, "DAGSTER_HOME": str(home)}
        dagster = Path(sys.executable).with_name("dagster")
        command = [str(dagster), "dev", "-w", str(REPO_DIR / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(ui_port)]
        with contextlib.suppress(KeyboardInterrupt):
            subprocess.run(command, env=env, cwd=REPO_DIR, check=False)
