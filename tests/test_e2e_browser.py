"""A newcomer's first materialization in the Dagster UI, in a real browser (Playwright on the system Chromium).

On a fresh deployment (`dagster dev` with deploy/dagster.yaml, its own DAGSTER_HOME and data dir), a new
workspace made with the CLI has its templates seeded (they cannot run: no connector, disabled) and two
pipelines over a loopback site. The `crawl_results` Materialize dialog offers exactly the two runnable
pipelines' partitions, each under a key that names its pipeline (`7-northwind-docs`); "All" and "Launch
backfill" run both, and every run succeeds; each partition's page then shows its pipeline's name in full.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from tests.conftest import missing
from tests.support.dagster_dev import BIN, REPO_DIR, Dev, dagster_dev, wait_for

# The system Chromium (.ci/run installs it when absent); the variable points elsewhere only to test the skip.
CHROMIUM = Path(os.environ.get("PIPELINES_TEST_CHROMIUM", "/usr/bin/chromium"))
RUNS_WITHIN_SECONDS = 180
UI_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if not CHROMIUM.exists():
        # .ci/run installs it, so under CI its absence fails the test.
        missing(f"no Chromium at {CHROMIUM}: install it (apt-get install chromium) to run the browser test")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed: make install-dev (the test extra) installs it")
    with sync_playwright() as playwright:
        # The system Chromium: Playwright's own browser download is never needed.
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def cli(dev: Dev, *args: str) -> dict:
    """A `pipelines-dagster ... --json` command against the deployment, as its user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "DAGSTER_"))}
    env |= {"DAGSTER_HOME": str(dev.home), "PIPELINES_DATA_DIR": str(dev.home.parent / "data")}
    done = subprocess.run(
        [str(BIN / "pipelines-dagster"), *args, "--json"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def new_workspace(dev: Dev) -> tuple[dict[str, str], set[str]]:
    """A workspace with its templates and two runnable pipelines: their partition keys to names, and the
    templates' ids."""
    workspace = cli(dev, "workspace", "create", "--name", "Northwind", "--owner", "newcomer")
    ws = str(workspace["id"])
    # The deployment bills crawls (dagster_dev turns billing on): the workspace needs credit to run.
    cli(dev, "credits", "grant", "--workspace", ws, "--micros", "1000000")
    runnable = {}
    for name, pages in (("Northwind docs", 3), ("Support FAQ", 2)):
        slug = name.split()[1].lower()
        urls = []
        for n in range(pages):
            dev.site.route(f"/{slug}/{n}", _page(f"{name} {n}"))
            urls += ["--url", dev.site.url(f"/{slug}/{n}")]
        connector = cli(dev, "connector", "create", "--workspace", ws, "--type", "webcrawler", *urls)
        made = cli(dev, "pipeline", "create", "--workspace", ws, "--connector", str(connector["id"]), "--name", name)
        runnable[made["partition_key"]] = name
    listed = cli(dev, "pipeline", "list", "--workspace", ws)["pipelines"]
    templates = {str(pipeline["id"]) for pipeline in listed if pipeline["template"]}
    assert templates and all(pipeline["partition_key"] is None for pipeline in listed if pipeline["template"])
    return runnable, templates


def _page(title: str):
    from tests.support.web import page

    return page(title, f"What {title} says, in a paragraph long enough to keep.")


def test_the_materialize_dialog_offers_the_runnable_pipelines_and_all_of_them_run(tmp_path, browser):
    with dagster_dev(tmp_path) as dev:
        runnable, templates = new_workspace(dev)
        # A fresh Dagster greets its first visitor with a community dialog that covers the page a moment after it
        # loads, and catches the clicks meant for it. Dismissing it sends this mutation; sent first, it never shows.
        assert dev.graphql("mutation { setNuxSeen }") == {"setNuxSeen": True}
        ui = browser.new_page(viewport={"width": 1500, "height": 1000})
        ui.set_default_timeout(UI_TIMEOUT_MS)
        ui.goto(f"{dev.ui_url}/assets/crawl_results")
        ui.get_by_text("Materialize…", exact=True).first.wait_for()
        # The left navigation's name for the asset catalog, as the README says.
        assert ui.get_by_role("link", name=re.compile("Catalog")).first.is_visible()

        ui.get_by_role("button", name=re.compile("Materialize…")).first.click()
        dialog = ui.get_by_role("dialog").filter(has_text="Launch runs to materialize crawl_results")
        dialog.get_by_role("button", name="All", exact=True).click()
        # Exactly the runnable pipelines' partitions, the templates' not among them.
        dialog.get_by_text(f"{len(runnable)} partitions", exact=True).wait_for()
        # Each selected partition is a chip holding its key (Dagster 1.13's MiddleTruncate, the key as its title).
        chips = dialog.locator("[class*='MiddleTruncate_container']")
        shown = {chips.nth(n).get_attribute("title") for n in range(chips.count())}
        assert shown == set(runnable), (shown, runnable)
        assert not shown & templates
        # The dialog names each pipeline: its key is its id and its name. A chip shows at most 120 px of it,
        # truncated in the middle ("6-north…nd-docs"); the key in full is its tooltip.
        for n in range(chips.count()):
            key, text = chips.nth(n).get_attribute("title"), chips.nth(n).locator("span").inner_text()
            pipeline_id = key.split("-", 1)[0]
            assert key == f"{pipeline_id}-{re.sub('[^a-z0-9]+', '-', runnable[key].lower())}", (key, runnable)
            head, _, tail = text.partition("…")
            assert key.startswith(head) and key.endswith(tail) and len(head) > len(pipeline_id) + 1, (key, text)

        dialog.get_by_role("button", name="Launch backfill").click()
        ui.get_by_text("Launch runs to materialize crawl_results").wait_for(state="hidden")

        def every_run_ended() -> list[dg.DagsterRun] | None:
            runs = [
                run
                for run in dev.instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": _backfill_id(dev)}))
                if run.is_finished
            ]
            return runs if len(runs) == len(runnable) else None

        runs = wait_for("the backfill's runs to end", every_run_ended, timeout=RUNS_WITHIN_SECONDS, every=1)
        assert {run.tags["dagster/partition"]: run.status for run in runs} == dict.fromkeys(
            runnable, dg.DagsterRunStatus.SUCCESS
        ), dev.log_tail()
        # Each run carries its pipeline's name, given when its crawl step started (a UI launch has only its partition).
        assert {run.tags["dagster/partition"]: run.tags["pipeline_name"] for run in runs} == runnable

        # The partition's page shows the pipeline's name beside its key.
        for key, name in runnable.items():
            ui.goto(f"{dev.ui_url}/assets/crawl_results?view=partitions&partition={key}")
            ui.get_by_text("pipeline_name").first.wait_for()
            assert ui.get_by_text(name, exact=True).first.is_visible()


def _backfill_id(dev: Dev) -> str:
    [backfill] = dev.instance.get_backfills()
    return backfill.backfill_id


# Under CI the browser fixture fails, which pytest reports as an error of the test: the run fails either way.
@pytest.mark.parametrize(("ci", "outcome", "code"), [("", "skipped", 0), ("true", "error", 1)])
def test_without_chromium_the_browser_test_skips_with_the_reason_and_fails_under_ci(tmp_path, ci, outcome, code):
    env = os.environ | {"PIPELINES_TEST_CHROMIUM": str(tmp_path / "no-chromium"), "CI": ci}
    done = subprocess.run(
        [str(BIN / "python"), "-m", "pytest", "-rsf", "-p", "no:cacheprovider", "-k", "materialize_dialog", __file__],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"1 {outcome}" in done.stdout and done.returncode == code, done.stdout[-2000:]
    assert f"no Chromium at {tmp_path / 'no-chromium'}" in done.stdout
