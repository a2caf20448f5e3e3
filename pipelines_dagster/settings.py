"""Environment → typed settings, with embedded defaults that need no servers."""

from __future__ import annotations

import os
import tempfile
from functools import cached_property
from ipaddress import ip_network
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipelines_dagster.core.crawl.site.config import DEFAULT_MAX_PAGES_CAP
from pipelines_dagster.core.errors import UserError
from pipelines_dagster.core.security.keyring import Keyring
from pipelines_dagster.core.security.network_policy import NetworkPolicy
from pipelines_dagster.core.triggers.fires import Budget

ENV_PREFIX = "PIPELINES_"
DAGSTER_URL_ENV = f"{ENV_PREFIX}DAGSTER_URL"
# Set by `pipelines-dagster worker` for its pool processes: the Celery worker (NAME@HOST) whose runs they execute.
WORKER_NAME_ENV = f"{ENV_PREFIX}WORKER_NAME"
DEFAULT_DAGSTER_URL = "http://127.0.0.1:3000"
# Where `pipelines-dagster api` listens unless told otherwise.
DEFAULT_API_URL = "http://127.0.0.1:8000"
SECRETS_KEY_ENV = f"{ENV_PREFIX}SECRETS_KEY"
# The embedded default's key file, in its data dir, when no key is set.
SECRETS_KEY_FILE = "secrets.key"
# Settings whose value a refusal never repeats.
_SECRET_SETTINGS = frozenset({"secrets_key"})


# The checkout the package runs from (an editable install: pyproject.toml beside the package), where `make run`
# keeps the embedded default's files; None when the package was installed from a wheel.
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]
CHECKOUT_DIR: Path | None = _PACKAGE_PARENT if (_PACKAGE_PARENT / "pyproject.toml").is_file() else None
DATA_DIR_NAME = ".pipelines-data"
APP_DATABASE_FILE = "app.sqlite3"
# The demo's ports: the Dagster UI's, and the example site's (the demo pipeline's URLs name it).
DEFAULT_UI_PORT = 3000
DEFAULT_SITE_PORT = 8765


def default_extraction_slots_dir() -> Path:
    """Where every process of the machine finds the extraction slots: the machine's temporary directory."""
    return Path(tempfile.gettempdir()) / "pipelines-dagster-extraction-slots"


def secrets_keyring(*, key: str | None, key_file: Path | None) -> Keyring | None:
    """The keys credentials are sealed under: those `key` holds (PIPELINES_SECRETS_KEY), else a key file's; None
    with neither."""
    if key:
        return Keyring.of(key, variable=SECRETS_KEY_ENV)
    return Keyring.in_file(key_file, variable=SECRETS_KEY_ENV) if key_file is not None else None


def default_data_dir() -> Path:
    """The checkout's data dir, whatever the current directory; the current directory's without a checkout."""
    return (CHECKOUT_DIR or Path.cwd()) / DATA_DIR_NAME


class SettingsError(UserError, ValueError):
    """A PIPELINES_* variable holds a value we cannot use; the message names it and its operator can fix it."""


class NoDeploymentError(UserError):
    """No embedded deployment where the settings point; the message says where that was and how to make one."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Directory for the embedded default: SQLite database, blobs, Dagster home. Default: "
        "`.pipelines-data` in the checkout the package is installed from, wherever the command runs.",
    )
    ui_port: int = Field(
        default=DEFAULT_UI_PORT, ge=1, le=65535, description="The port `demo` (`make run`) serves the Dagster UI on."
    )
    site_port: int = Field(
        default=DEFAULT_SITE_PORT,
        ge=1,
        le=65535,
        description="The loopback port `demo` (`make run`) serves the example site on.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the app database; default a SQLite file in the data dir.",
    )
    blob_store: str | None = Field(
        default=None,
        description="A local directory, or s3://bucket/prefix; default a directory in the data dir.",
    )
    s3_endpoint_url: str | None = Field(
        default=None, description="Endpoint of an S3-compatible server (MinIO, moto, R2 ...)."
    )
    locks: str = Field(default="database", description="'database' or a redis:// URL.")
    billing_enabled: bool = False
    micros_per_crawl: int = Field(default=1000, ge=0)
    schedule_batch_size: int = Field(default=500, ge=1, description="Due schedule triggers claimed per transaction.")
    trigger_batch_size: int = Field(
        default=500, ge=1, description="Webhook deliveries or domain events taken per transaction."
    )
    trigger_max_per_tick: int = Field(
        default=5000,
        ge=1,
        description="Webhook deliveries or domain events taken per sensor tick; the rest wait for the next tick.",
    )
    run_batch_size: int = Field(
        default=20,
        ge=1,
        description="Scheduled fires due together run as batch runs of at most this many pipelines; 1: a run each.",
    )
    site_max_pages_cap: int = Field(
        default=DEFAULT_MAX_PAGES_CAP,
        ge=1,
        le=1_000_000,
        description="The most pages a site crawl may be set to fetch (its max pages is refused above this).",
    )
    retention_days: int = Field(
        default=30, ge=1, description="Crawl blobs and webhook deliveries older than this are deleted daily."
    )
    crawler_shared_host_budget: bool | None = Field(
        default=None,
        description=(
            "Share each host's concurrency and Crawl-delay across all runs through the locks backend. "
            "Default: on with Redis locks, off with database locks (a lease write per request costs an "
            "embedded SQLite crawl about 10% of its throughput)."
        ),
    )
    api_url: str = Field(
        default=DEFAULT_API_URL,
        description="Where users reach the HTTP API (e.g. https://pipelines.example.com): the base of the links "
        "notifications carry. Default: where `pipelines-dagster api` listens by default.",
    )
    dagster_url: str = Field(
        default=DEFAULT_DAGSTER_URL,
        description="The Dagster webserver: where run-now launches and the base of the run links in run history "
        "and notifications.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="The most bytes of request line and headers the API and MCP servers read of one request; "
        "more is answered 431 and the connection closed.",
    )
    max_headers: int = Field(
        default=100, ge=1, description="The most header lines one request to the API or MCP server may carry (431)."
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="The largest request body the API (webhooks aside: their cap is 1 MiB) and the MCP server "
        "accept; a larger one is answered 413 before it is read.",
    )
    extraction_slots_dir: Path = Field(
        default_factory=default_extraction_slots_dir,
        description="The directory through which the runs on one machine share its extraction slots: give every "
        "process of a machine the same one. Default: pipelines-dagster-extraction-slots in the temporary "
        "directory ($TMPDIR or /tmp).",
    )
    extraction_slots: int | None = Field(
        default=None,
        ge=1,
        description="The most text extraction processes live at once across all runs sharing the extraction slots "
        "directory. Default: the cores this process may use.",
    )
    secrets_key: SecretStr | None = Field(
        default=None,
        description="The Fernet keys connector credentials are sealed under, comma-separated, newest first (make one "
        "with `pipelines-dagster secrets new-key`; rotate with `pipelines-dagster secrets rotate`). Default: a key "
        f"file, {SECRETS_KEY_FILE} in the data dir, made on first use.",
    )
    crawler_allow_private_networks: bool = False
    crawler_allowed_networks: str = Field(
        default="",
        description="Comma-separated networks the crawler may reach despite the SSRF guard, e.g. 127.0.0.1/32.",
    )

    @field_validator(
        "data_dir", "extraction_slots_dir", "extraction_slots", "api_url", "dagster_url", "secrets_key", mode="before"
    )
    @classmethod
    def _empty_is_unset(cls, value: object, info: ValidationInfo) -> object:
        # Set but empty (`PIPELINES_DATA_DIR=`) is unset, so it takes the default: as a path it would be the
        # current directory, and links always have a base.
        if value in (None, "") and info.field_name is not None:
            return cls.model_fields[info.field_name].get_default(call_default_factory=True)
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme.split("+", 1)[0] not in {"sqlite", "postgresql", "postgres"}:
            raise ValueError(
                "must be a sqlite:/// or postgresql:// URL, e.g. postgresql://user@127.0.0.1:5432/pipelines"
            )
        return value

    @field_validator("blob_store")
    @classmethod
    def _blob_store(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if "://" in value:
            parsed = urlparse(value)
            if parsed.scheme != "s3" or not parsed.netloc:
                raise ValueError("must be a directory path or s3://bucket/prefix")
        return value

    @field_validator("s3_endpoint_url", "api_url", "dagster_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        parsed = urlparse(value)
        if parsed.scheme not in {"http", "https"} or not parsed.netloc:
            raise ValueError("must be an http(s) URL such as http://127.0.0.1:9000")
        return value

    @field_validator("locks")
    @classmethod
    def _locks(cls, value: str) -> str:
        if value == "database":
            return value
        parsed = urlparse(value)
        if parsed.scheme in {"redis", "rediss", "unix"} and (parsed.netloc or parsed.path):
            return value
        raise ValueError("must be 'database' or a redis:// URL such as redis://127.0.0.1:6379/0")

    @field_validator("secrets_key")
    @classmethod
    def _secrets_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                Keyring.of(value.get_secret_value(), variable=SECRETS_KEY_ENV)
            except UserError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("crawler_allowed_networks")
    @classmethod
    def _allowed_networks(cls, value: str) -> str:
        for network in filter(None, (part.strip() for part in value.split(","))):
            try:
                ip_network(network)
            except ValueError:
                raise ValueError(f"{network!r} is not a network; write CIDRs like 127.0.0.1/32,10.20.0.0/16") from None
        return value

    @property
    def shares_host_budget(self) -> bool:
        """Whether crawls share one per-host budget through the locks backend."""
        if self.crawler_shared_host_budget is not None:
            return self.crawler_shared_host_budget
        return self.locks != "database"

    @property
    def trigger_budget(self) -> Budget:
        """What one webhook or event sensor tick takes."""
        return Budget(batch_size=self.trigger_batch_size, max_rows=self.trigger_max_per_tick)

    @property
    def schedule_budget(self) -> Budget:
        """What one schedule sensor tick claims: every due trigger, within the time budget."""
        return Budget(batch_size=self.schedule_batch_size, max_rows=None)

    @property
    def launch_url(self) -> str:
        """The Dagster webserver run-now launches through."""
        return self.dagster_url

    @cached_property
    def allowed_networks(self) -> tuple[str, ...]:
        return tuple(filter(None, (part.strip() for part in self.crawler_allowed_networks.split(","))))

    @cached_property
    def network_policy(self) -> NetworkPolicy:
        """Where the crawler may connect, and notifications with it."""
        return NetworkPolicy(
            allow_private_networks=self.crawler_allow_private_networks, allowed_networks=self.allowed_networks
        )

    @cached_property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / APP_DATABASE_FILE).resolve()}"

    def require_deployment(self) -> None:
        """Refuse, naming where it looked and how to make one, when the embedded default's app database does not
        exist: a command run elsewhere would otherwise start a second, empty deployment without a word."""
        if self.database_url is not None or (self.data_dir / APP_DATABASE_FILE).is_file():
            return
        if self.data_dir != default_data_dir():
            where = "PIPELINES_DATA_DIR"
        else:
            where = "the checkout's data dir" if CHECKOUT_DIR else "the current directory's data dir"
        raise NoDeploymentError(
            f"no deployment at {self.data_dir.resolve()} ({where}): create one with `make run` (the demo) or "
            "`pipelines-dagster db upgrade`, or set PIPELINES_DATA_DIR (or PIPELINES_DATABASE_URL) to an existing one"
        )

    @cached_property
    def s3_location(self) -> tuple[str, str] | None:
        """(bucket, prefix) when the blob store is S3, else None."""
        if self.blob_store is None or not self.blob_store.startswith("s3://"):
            return None
        parsed = urlparse(self.blob_store)
        return parsed.netloc, parsed.path.strip("/")

    @cached_property
    def blob_dir(self) -> Path:
        if self.s3_location is not None:
            raise SettingsError("PIPELINES_BLOB_STORE is an S3 location, not a directory")
        return Path(self.blob_store).resolve() if self.blob_store else (self.data_dir / "blobs").resolve()

    @cached_property
    def dagster_home(self) -> Path:
        return (self.data_dir / "dagster-home").resolve()

    @property
    def secrets_key_file(self) -> Path:
        """The embedded default's key file: used when PIPELINES_SECRETS_KEY is not set."""
        return (self.data_dir / SECRETS_KEY_FILE).resolve()

    def keyring(self) -> Keyring:
        """The keys connector credentials are sealed under; the key file's are read (made) on first use."""
        key = self.secrets_key.get_secret_value() if self.secrets_key is not None else None
        keyring = secrets_keyring(key=key, key_file=self.secrets_key_file)
        assert keyring is not None  # a key file is always named
        return keyring


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment; a bad value raises SettingsError naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            message = error["msg"].removeprefix("Value error, ")
            given = "" if field in _SECRET_SETTINGS else f" (got {error.get('input')!r})"
            problems.append(f"{ENV_PREFIX}{field.upper()}: {message}{given}")
        raise SettingsError("; ".join(problems)) from None


def worker_name() -> str | None:
    """The Celery worker this process executes runs for (NAME@HOST); None outside a worker's pool process."""
    return os.environ.get(WORKER_NAME_ENV) or None
