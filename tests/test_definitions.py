"""The code location loads, refuses bad settings by variable name, wires backends by settings, and
imports only what its definitions need."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import LocalBlobStoreResource, S3BlobStoreResource
from pipelines_dagster.resources.deployment import build_resources
from pipelines_dagster.resources.locks import DatabaseLocksResource, RedisLocksResource
from pipelines_dagster.settings import ENV_PREFIX, load_settings

REPO = Path(__file__).resolve().parents[1]
# Every run process imports the code location anew, so loading it must not import what only
# some runs, or only other processes, use. Each is imported where it is used.
KEPT_OUT_OF_LOADING = (
    "boto3",  # the S3 blob backend
    "botocore",
    "redis",  # the Redis locks backend
    "trafilatura",  # the extraction worker processes
    "lxml",
    "httpx",  # the crawl engine
    "croniter",  # cron maths: sensors, CLI and API
    "fastapi",  # the HTTP API
    "alembic",  # migrations
    "dagster_graphql",  # run-now launches through the webserver
)


def run_in_repo(
    tmp_path: Path, args: list[str], *, instance_config: Path = REPO / "deploy" / "dagster.yaml", **env: str
) -> subprocess.CompletedProcess[str]:
    """Python with `args` from the repo root, on a Dagster home with `instance_config` as its dagster.yaml;
    Dagster and app data go to tmp_path."""
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(instance_config, home / "dagster.yaml")
    # The caller's own PIPELINES_* and DAGSTER_* must not decide what is tested.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith((ENV_PREFIX, "DAGSTER_"))}
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env={
            **inherited,
            "DAGSTER_HOME": str(home),
            "PIPELINES_DATA_DIR": str(tmp_path / "data"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )


def validate(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`dagster definitions validate` of workspace.yaml."""
    return run_in_repo(tmp_path, ["-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"], **env)


def importers(importtime_report: str) -> dict[str, list[str]]:
    """Each module a `python -X importtime` report names, with the chain of imports that loaded it,
    outermost first."""
    chains: dict[str, list[str]] = {}
    stack: list[str] = []
    # The report names a module after those it imported, which are indented one level deeper;
    # read backwards, every module comes right after the one that imported it.
    for line in reversed(importtime_report.splitlines()):
        if not line.startswith("import time:") or line.endswith("imported package"):
            continue
        column = line.rsplit("|", 1)[1]
        depth = (len(column) - len(column.lstrip()) - 1) // 2
        module = column.strip()
        chains[module] = stack[:depth]
        stack[depth:] = [module]
    return chains


def is_env_var(value: object, name: str) -> bool:
    return isinstance(value, dg.EnvVar) and value.env_var_name == name


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    return monkeypatch


def test_workspace_validates(tmp_path: Path) -> None:
    result = validate(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All code locations passed validation" in result.stderr + result.stdout


def test_bad_setting_fails_loading_with_the_variable_named(tmp_path: Path) -> None:
    result = validate(tmp_path, PIPELINES_LOCKS="bogus")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "SettingsError: PIPELINES_LOCKS: must be 'database' or a redis:// URL" in output


def test_defaults_are_local_blobs_and_database_locks(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    resources = build_resources(settings)

    assert set(resources) == {"app_db", "blob_store", "locks", "billing", "crawler", "notifications"}
    # The SSRF guard is on by default, for crawls and notifications alike: no private networks, no exceptions.
    for guarded in ("crawler", "notifications"):
        assert resources[guarded].network.policy() == NetworkPolicy(allow_private_networks=False, allowed_networks=())
    assert resources["app_db"].url == settings.resolved_database_url
    assert isinstance(resources["blob_store"], LocalBlobStoreResource)
    assert resources["blob_store"].root == str(tmp_path.resolve() / "blobs")
    assert isinstance(resources["locks"], DatabaseLocksResource)
    assert resources["locks"].database_url == settings.resolved_database_url
    billing = resources["billing"]
    assert isinstance(billing, BillingResource)
    assert billing.app_db is resources["app_db"]
    assert billing.billing_enabled is False


def test_s3_and_redis_settings_pick_s3_and_redis(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("PIPELINES_BLOB_STORE", "s3://crawls/pipelines/raw")
    clean_env.setenv("PIPELINES_S3_ENDPOINT_URL", "http://127.0.0.1:9000")
    clean_env.setenv("PIPELINES_LOCKS", "redis://:hunter2@127.0.0.1:6379/0")
    clean_env.setenv("PIPELINES_DATABASE_URL", "postgresql://app:hunter2@127.0.0.1:5432/pipelines")

    resources = build_resources(load_settings())

    blob_store = resources["blob_store"]
    assert isinstance(blob_store, S3BlobStoreResource)
    assert (blob_store.bucket, blob_store.prefix) == ("crawls", "pipelines/raw")
    assert blob_store.endpoint_url == "http://127.0.0.1:9000"
    locks = resources["locks"]
    assert isinstance(locks, RedisLocksResource)
    # URLs that may carry passwords are wired as env vars, read when a run starts.
    assert is_env_var(locks.url, "PIPELINES_LOCKS")
    assert is_env_var(resources["app_db"].url, "PIPELINES_DATABASE_URL")
    assert "hunter2" not in repr(resources)


def test_the_crawler_and_notifications_share_the_one_network_policy_and_dagster_url(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("PIPELINES_CRAWLER_ALLOWED_NETWORKS", "10.20.0.0/16, 127.0.0.1/32")
    clean_env.setenv("PIPELINES_DAGSTER_URL", "https://dagster.example.com")
    settings = load_settings(data_dir=tmp_path)
    resources = build_resources(settings)
    policy = NetworkPolicy(allowed_networks=("10.20.0.0/16", "127.0.0.1/32"))
    assert settings.network_policy == policy
    assert resources["crawler"].network.policy() == resources["notifications"].network.policy() == policy
    assert resources["notifications"].dagster_url == "https://dagster.example.com"


def test_env_var_urls_resolve_when_resources_start(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'app.sqlite3'}"
    clean_env.setenv("PIPELINES_DATABASE_URL", database_url)

    resources = build_resources(load_settings(data_dir=tmp_path))
    assert is_env_var(resources["locks"].database_url, "PIPELINES_DATABASE_URL")

    with dg.build_resources(resources) as started:
        assert started.app_db.url == database_url
        assert started.locks.database_url == database_url
        assert started.billing.app_db.url == database_url


@pytest.mark.parametrize(
    "backends",
    [{}, {"PIPELINES_BLOB_STORE": "s3://crawls/raw", "PIPELINES_LOCKS": "redis://127.0.0.1:6379/0"}],
    ids=["embedded", "s3-and-redis"],
)
def test_loading_the_code_location_imports_only_what_the_definitions_need(
    tmp_path: Path, backends: dict[str, str]
) -> None:
    script = "import json, sys, pipelines_dagster.definitions; print(json.dumps(sorted(sys.modules)))"
    result = run_in_repo(tmp_path, ["-X", "importtime", "-c", script], **backends)
    assert result.returncode == 0, result.stderr
    loaded = {name.partition(".")[0] for name in json.loads(result.stdout.splitlines()[-1])}
    chains = importers(result.stderr)
    imported = [
        f"{module} (by {' -> '.join(chains.get(module, ['an unreported import']))})"
        for module in KEPT_OUT_OF_LOADING
        if module in loaded
    ]
    assert not imported, (
        f"loading pipelines_dagster.definitions imported {'; '.join(imported)}. Every run process pays "
        "for what the code location imports: import these where they are used."
    )
