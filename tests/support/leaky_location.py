"""A code location, for tests/support/leaky_tasks.py, that sets an environment variable as it is imported, as
pipelines_dagster.definitions sets Dagster's sensor limits: the pool process's own from its first task on."""

from __future__ import annotations

import os

from tests.support.leaky_tasks import LOCATION_VARIABLE

os.environ[LOCATION_VARIABLE] = str(os.getpid())
