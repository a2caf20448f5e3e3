"""The app database as a Dagster resource: one engine and session factory per run."""

from __future__ import annotations

import time

import dagster as dg
import sqlalchemy as sa
from pydantic import PrivateAttr
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.app_db.engine import create_engine, session_factory


class AppDatabaseResource(dg.ConfigurableResource["AppDatabaseResource"]):
    url: str

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
