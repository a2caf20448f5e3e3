"""Settings from the environment: embedded defaults, and bad values named at start."""

from __future__ import annotations

import pytest

from pipelines_dagster.resources.deployment import build_resources
from pipelines_dagster.settings import CHECKOUT_DIR, SettingsError, load_settings

VARIABLES = [
    "PIPELINES_DATA_DIR",
    "PIPELINES_DATABASE_URL",
    "PIPELINES_BLOB_STORE",
    "PIPELINES_S3_ENDPOINT_URL",
    "PIPELINES_LOCKS",
    "PIPELINES_BILLING_ENABLED",
    "PIPELINES_MICROS_PER_CRAWL",
    "PIPELINES_CRAWLER_ALLOW_PRIVATE_NETWORKS",
    "PIPELINES_CRAWLER_ALLOWED_NETWORKS",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def test_embedded_defaults_need_no_servers(tmp_path):
    # The checkout's data dir, not the current directory's (clean_env runs the test in tmp_path).
    settings = load_settings()
    assert CHECKOUT_DIR is not None
    data = (CHECKOUT_DIR / ".pipelines-data").resolve()
    assert settings.resolved_database_url == f"sqlite:///{data / 'app.sqlite3'}"
    assert settings.blob_dir == data / "blobs" and settings.s3_location is None
    assert settings.locks == "database"
    assert (settings.billing_enabled, settings.micros_per_crawl) == (False, 1000)
    assert settings.crawler_allow_private_networks is False
    assert settings.allowed_networks == ()


def test_allowed_networks_are_a_comma_separated_list(monkeypatch):
    monkeypatch.setenv("PIPELINES_CRAWLER_ALLOWED_NETWORKS", " 127.0.0.1/32, ::1/128 ,")
    assert load_settings().allowed_networks == ("127.0.0.1/32", "::1/128")


def test_production_values_are_parsed(monkeypatch):
    monkeypatch.setenv("PIPELINES_DATABASE_URL", "postgres://app@db:5432/pipelines")
    monkeypatch.setenv("PIPELINES_BLOB_STORE", "s3://crawl-results/prod/runs/")
    monkeypatch.setenv("PIPELINES_S3_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("PIPELINES_LOCKS", "redis://127.0.0.1:6379/2")
    monkeypatch.setenv("PIPELINES_BILLING_ENABLED", "true")
    monkeypatch.setenv("PIPELINES_MICROS_PER_CRAWL", "250")
    settings = load_settings()
    # Kept as given, so the resource can take it as an EnvVar; the engine maps postgres:// itself.
    assert settings.resolved_database_url == "postgres://app@db:5432/pipelines"
    assert settings.s3_location == ("crawl-results", "prod/runs")
    assert settings.locks == "redis://127.0.0.1:6379/2"
    assert (settings.billing_enabled, settings.micros_per_crawl) == (True, 250)
    with pytest.raises(SettingsError, match="PIPELINES_BLOB_STORE"):
        _ = settings.blob_dir


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PIPELINES_DATABASE_URL", "mysql://root@localhost/app"),
        ("PIPELINES_BLOB_STORE", "gs://bucket/prefix"),
        ("PIPELINES_S3_ENDPOINT_URL", "127.0.0.1:9000"),
        ("PIPELINES_LOCKS", "memcached://localhost"),
        ("PIPELINES_BILLING_ENABLED", "sometimes"),
        ("PIPELINES_MICROS_PER_CRAWL", "-1"),
        ("PIPELINES_MICROS_PER_CRAWL", "lots"),
        ("PIPELINES_CRAWLER_ALLOW_PRIVATE_NETWORKS", "perhaps"),
        ("PIPELINES_CRAWLER_ALLOWED_NETWORKS", "127.0.0.1/32,localhost"),
        ("PIPELINES_TRIGGER_BATCH_SIZE", "0"),
        ("PIPELINES_TRIGGER_MAX_PER_TICK", "none"),
        ("PIPELINES_DAGSTER_URL", "127.0.0.1:3000"),
    ],
)
def test_a_wrong_value_fails_naming_the_variable(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert str(raised.value).startswith(f"{variable}: ")
    assert repr(value) in str(raised.value)


def test_the_trigger_sensors_budgets_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("PIPELINES_TRIGGER_BATCH_SIZE", "50")
    monkeypatch.setenv("PIPELINES_TRIGGER_MAX_PER_TICK", "200")
    monkeypatch.setenv("PIPELINES_SCHEDULE_BATCH_SIZE", "70")
    settings = load_settings()
    assert (settings.trigger_budget.batch_size, settings.trigger_budget.max_rows) == (50, 200)
    assert (settings.schedule_budget.batch_size, settings.schedule_budget.max_rows) == (70, None)


def test_run_now_and_every_link_default_to_the_default_servers(monkeypatch, tmp_path):
    for unset in (None, ""):
        for name in ("PIPELINES_DAGSTER_URL", "PIPELINES_API_URL"):
            if unset is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, unset)
        default = load_settings(data_dir=tmp_path)
        assert (default.dagster_url, default.launch_url) == ("http://127.0.0.1:3000",) * 2
        assert default.api_url == "http://127.0.0.1:8000"
        resources = build_resources(default)
        assert (resources["notifications"].dagster_url, resources["notifications"].api_url) == (
            "http://127.0.0.1:3000",
            "http://127.0.0.1:8000",
        )
    monkeypatch.setenv("PIPELINES_DAGSTER_URL", "https://dagster.example.com")
    given = load_settings()
    assert (given.dagster_url, given.launch_url) == ("https://dagster.example.com",) * 2
