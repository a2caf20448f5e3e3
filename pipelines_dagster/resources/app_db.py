"""The app database as a Dagster resource: one engine and session factory per run, and the keys that open the
credentials it holds sealed."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import sqlalchemy as sa
from pydantic import Field, PrivateAttr
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import create_engine, session_factory
from pipelines_dagster.core.security.keyring import Keyring
from pipelines_dagster.settings import secrets_keyring


class AppDatabaseResource(dg.ConfigurableResource["AppDatabaseResource"]):
    url: str
    secrets_key: str | None = Field(
        default=None,
        description="The keys connector credentials are sealed under, comma-separated, newest first: given as "
        "dg.EnvVar('PIPELINES_SECRETS_KEY'), so it is read as the resource starts and never shown with its config.",
    )
    secrets_key_file: str | None = Field(
        default=None, description="Without secrets_key: the key file that holds them (the embedded default's)."
    )

    _engine: sa.Engine | None = PrivateAttr(default=None)
    _set_up_at: float | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._engine = create_engine(self.url)
        self._set_up_at = time.monotonic()

    @property
    def seconds_set_up(self) -> float:
        """How long ago Dagster set this resource up (0 when it did not): for a sensor, how long its tick has
        been going, since a sensor's resources are set up once per tick, before its first run or request."""
        return time.monotonic() - self._set_up_at if self._set_up_at is not None else 0.0

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            self._engine = create_engine(self.url)
        return self._engine

    @property
    def sessions(self) -> sessionmaker[Session]:
        return session_factory(self.engine)

    def keyring(self) -> Keyring | None:
        """The keys that open connector credentials; None when neither a key nor a key file is given (a crawl
        of a connector with credentials is then refused, saying what to set)."""
        key_file = Path(self.secrets_key_file) if self.secrets_key_file is not None else None
        return secrets_keyring(key=self.secrets_key, key_file=key_file)
