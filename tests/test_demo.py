"""The headless demo, as a new user runs it: the example site crawled into the KB on the embedded default."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("pipelines-dagster")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def demo_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "DAGSTER_"))}
    return {**env, "PIPELINES_DATA_DIR": str(tmp_path / "data")}


def run_demo(env: dict[str, str], port: int) -> dict:
    done = subprocess.run(
        [SCRIPT, "demo", "--once", "--site-port", str(port)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_demo_once_crawls_the_example_site_into_the_kb(demo_env, tmp_path):
    port = free_port()
    first = run_demo(demo_env, port)
    assert first["documents"] >= 30 and first["documents_created"] == first["urls_succeeded"] >= 30
    # The draft page is disallowed by robots.txt, and reported rather than crawled.
    assert first["urls_failed"] == 1
    blob = Path(first["blob_url"].removeprefix("file://"))
    records = [json.loads(line) for line in blob.read_text().splitlines()]
    [refused] = [r for r in records if r["status"] == "failed"]
    assert refused["error"] == "disallowed by robots.txt" and "/drafts/" in refused["url"]
    assert "api_token" in first
    second = run_demo(demo_env, port)
    assert (second["documents_created"], second["documents_unchanged"]) == (0, first["documents"])
    assert second["documents"] == first["documents"] and "api_token" not in second


def test_demo_names_a_busy_port(demo_env):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        done = subprocess.run(
            [SCRIPT, "demo", "--once", "--site-port", str(busy.getsockname()[1])],
            env=demo_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert "--site-port" in done.stderr and "Traceback" not in done.stderr


def kb_documents(data_dir: Path) -> dict[str, int]:
    """Ready KB documents per pipeline name, read from the demo's app database."""
    with sqlite3.connect(data_dir / "app.sqlite3") as db:
        rows = db.execute(
            "SELECT p.name, count(*) FROM documents d JOIN pipelines p ON p.id = d.pipeline_id"
            " WHERE d.status_state = 'ready' GROUP BY p.name"
        ).fetchall()
    return dict(rows)


def connector_urls(data_dir: Path, pipeline_id: int) -> list[str]:
    with sqlite3.connect(data_dir / "app.sqlite3") as db:
        [(config,)] = db.execute(
            "SELECT c.config FROM connectors c JOIN pipelines p ON p.connector_id = c.id WHERE p.id = ?",
            (pipeline_id,),
        ).fetchall()
    return json.loads(config)["INITIAL_URLS"]


def test_a_demo_on_another_port_leaves_the_demo_pipeline_alone_and_no_demo_duplicates_documents(demo_env, tmp_path):
    data = Path(demo_env["PIPELINES_DATA_DIR"])
    port, other_port = free_port(), free_port()
    first = run_demo(demo_env, port)
    pages = first["documents"]
    urls = connector_urls(data, first["pipeline_id"])
    assert pages >= 30 and all(url.startswith(f"http://127.0.0.1:{port}/") for url in urls)
    again = run_demo(demo_env, port)
    assert again["pipeline_id"] == first["pipeline_id"] and again["documents_created"] == 0
    assert kb_documents(data) == {demo_name(port): pages}

    elsewhere = run_demo(demo_env, other_port)
    assert elsewhere["pipeline_id"] != first["pipeline_id"] and elsewhere["documents"] == pages
    # The first demo's pipeline still crawls its own port, and neither pipeline holds the other's pages.
    assert connector_urls(data, first["pipeline_id"]) == urls
    assert kb_documents(data) == {demo_name(port): pages, demo_name(other_port): pages}
    assert run_demo(demo_env, port)["documents_created"] == 0
    assert kb_documents(data) == {demo_name(port): pages, demo_name(other_port): pages}


def demo_name(port: int) -> str:
    """The demo pipeline's name over the site on `port` (the default port's is plain)."""
    return "Northwind docs" if port == 8765 else f"Northwind docs (port {port})"
