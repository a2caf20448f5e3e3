"""Run a pipeline now: refuse what its guards would refuse, then launch `pipeline_run` on the running Dagster.

The launch goes through the Dagster webserver's GraphQL API, so the run lands in
the deployment's own queue (and its one-run-per-pipeline limit) like a UI launch.
The HTTP API's `POST .../run` and `pipelines-dagster pipeline run` both use it.
"""

from __future__ import annotations

import os
from typing import Protocol
from urllib.parse import urlsplit

import requests
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.core import catalog
from pipelines_dagster.core.run_engine import plan_run
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.partitions import partition_key
from pipelines_dagster.runs import PARTITION_TAG, Trigger, run_tags
from pipelines_dagster.settings import DAGSTER_URL_ENV, SettingsError

DEFAULT_DAGSTER_URL = "http://127.0.0.1:3000"
# Dagster's own tag for the partition a run materializes, as the UI's launchpad sets it.
LAUNCH_TIMEOUT_SECONDS = 30


class DagsterUnavailableError(RuntimeError):
    """The Dagster webserver cannot be reached; the message says what to start."""


class LaunchFailedError(RuntimeError):
    """The webserver answered but did not launch the run; the message carries its reason."""


class Launcher(Protocol):
    def __call__(self, *, workspace_id: int, pipeline_id: int) -> str:
        """Launch the pipeline's `pipeline_run` for its partition with the manual trigger; return the run id."""
        ...


def dagster_url() -> str:
    return os.environ.get(DAGSTER_URL_ENV) or DEFAULT_DAGSTER_URL


class GraphQLLauncher:
    """Submits `pipeline_run` for one pipeline's partition to a Dagster webserver."""

    def __init__(self, url: str | None = None, *, timeout: int = LAUNCH_TIMEOUT_SECONDS) -> None:
        self.url = (url or dagster_url()).rstrip("/")
        self._parts = urlsplit(self.url)
        if self._parts.scheme not in {"http", "https"} or not self._parts.hostname:
            raise SettingsError(
                f"{DAGSTER_URL_ENV}: must be the Dagster webserver's http(s) URL such as {DEFAULT_DAGSTER_URL} "
                f"(got {self.url!r})"
            )
        self._timeout = timeout

    def _client(self) -> DagsterGraphQLClient:
        # One per launch: a client's transport holds one session and refuses a concurrent second user.
        hostname = self._parts.hostname
        assert hostname is not None  # __init__ refused a URL without one
        return DagsterGraphQLClient(
            hostname,
            port_number=self._parts.port,
            use_https=self._parts.scheme == "https",
            path_prefix=self._parts.path.rstrip("/"),
            timeout=self._timeout,
        )

    def __call__(self, *, workspace_id: int, pipeline_id: int) -> str:
        tags = {
            **run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=Trigger.MANUAL),
            PARTITION_TAG: partition_key(pipeline_id),
        }
        try:
            return self._client().submit_job_execution(pipeline_run.name, tags=tags)
        except DagsterGraphQLClientError as exc:
            if _unreachable(exc):
                raise DagsterUnavailableError(
                    f"cannot reach the Dagster webserver at {self.url}; start it with `dagster dev` "
                    f"(or `dagster-webserver -w workspace.yaml`), or point {DAGSTER_URL_ENV} at it"
                ) from None
            # Transport failures carry the query in their message; their cause says what happened.
            reason = str(exc.__cause__) if exc.__cause__ else ": ".join(map(str, exc.args))
            raise LaunchFailedError(
                f"the Dagster webserver at {self.url} did not launch the run ({reason}); "
                "check that it loads the pipelines_dagster code location"
            ) from None


def _unreachable(error: BaseException) -> bool:
    """Whether the launch failed for want of a connection, however deep the clients wrapped that."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, requests.ConnectionError | requests.Timeout):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def launch_pipeline_run(
    sessions: sessionmaker[Session],
    *,
    workspace_id: int,
    pipeline_id: int,
    launcher: Launcher | None = None,
) -> str:
    """Launch a manual run of a pipeline of the workspace; return its run id.

    NotFoundError when the pipeline is not the workspace's; RunRefused (with the
    reason) when the run's own guards would stop it, so no run is created.
    """
    with sessions() as session:
        catalog.get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        plan_run(session, pipeline_id)
    # A pipeline disabled between this check and the run start is still refused, by crawl_results itself.
    return (launcher or GraphQLLauncher())(workspace_id=workspace_id, pipeline_id=pipeline_id)
