"""The code location loads, refuses bad settings by variable name, and wires backends by settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipelines_dagster.resources import build_resources
from pipelines_dagster.resources.billing import BillingResource
from pipelines_dagster.resources.blob_store import LocalBlobStoreResource, S3BlobStoreResource
from pipelines_dagster.resources.locks import DatabaseLocksResource, RedisLocksResource
from pipelines_dagster.settings import ENV_PREFIX, load_settings

REPO = Path(__file__).resolve().parents[1]


def validate(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`dagster definitions validate` from the repo root; Dagster and app data go to tmp_path."""
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    # The caller's own PIPELINES_* and DAGSTER_* must not decide what is tested.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith((ENV_PREFIX, "DAGSTER_"))}
    return subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
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


def test_defaults_are_local_blobs_and_database_locks(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = load_settings(data_dir=tmp_path)
    resources = build_resources(settings)

    assert set(resources) == {"app_db", "blob_store", "locks", "billing", "crawler"}
    # The SSRF guard is on by default: no private networks, no exceptions.
    assert resources["crawler"].allow_private_networks is False
    assert resources["crawler"].allowed_networks == []
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


def test_env_var_urls_resolve_when_resources_start(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    database_url = f"sqlite:///{tmp_path / 'app.sqlite3'}"
    clean_env.setenv("PIPELINES_DATABASE_URL", database_url)

    resources = build_resources(load_settings(data_dir=tmp_path))
    assert is_env_var(resources["locks"].database_url, "PIPELINES_DATABASE_URL")

    with dg.build_resources(resources) as started:
        assert started.app_db.url == database_url
        assert started.locks.database_url == database_url
        assert started.billing.app_db.url == database_url
