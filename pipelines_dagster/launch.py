"""Run a pipeline now: refuse what its guards (and its manual trigger) refuse, then launch `pipeline_run` on Dagster.

The launch goes through the Dagster webserver's GraphQL API, so the run lands in
the deployment's own queue (and its one-run-per-pipeline limit) like a UI launch.
The HTTP API's `POST .../run` and `pipelines-dagster pipeline run` both use it.
"""

from __future__ import annotations

import os
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.core import catalog
from pipelines_dagster.core.run_engine import plan_manual_run
from pipelines_dagster.runs import (
    CODE_LOCATION,
    PARTITION_TAG,
    PIPELINE_RUN_JOB,
    REPOSITORY,
    Trigger,
    partition_key,
    run_tags,
)
from pipelines_dagster.settings import DAGSTER_URL_ENV, SettingsError

DEFAULT_DAGSTER_URL = "http://127.0.0.1:3000"
LAUNCH_TIMEOUT_SECONDS = 30
# The UI's own launch: one mutation, the job named by location and repository, so nothing else is
# asked first. Plain HTTP, not Dagster's GraphQL client: `pipelines-dagster pipeline run` then starts
# without importing Dagster, which on a busy machine was most of the ten seconds a run may take to start.
LAUNCH_RUN = """mutation($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on Error { message }
  }
}"""


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
        parts = urlsplit(self.url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise SettingsError(
                f"{DAGSTER_URL_ENV}: must be the Dagster webserver's http(s) URL such as {DEFAULT_DAGSTER_URL} "
                f"(got {self.url!r})"
            )
        self._timeout = timeout

    def __call__(self, *, workspace_id: int, pipeline_id: int) -> str:
        tags = {
            **run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=Trigger.MANUAL),
            PARTITION_TAG: partition_key(pipeline_id),
        }
        params: dict[str, Any] = {
            "selector": {
                "repositoryLocationName": CODE_LOCATION,
                "repositoryName": REPOSITORY,
                "jobName": PIPELINE_RUN_JOB,
            },
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": key, "value": value} for key, value in tags.items()]},
        }
        try:
            # A session each: launches from many threads at once share nothing.
            with requests.Session() as session:
                answer = session.post(
                    f"{self.url}/graphql",
                    json={"query": LAUNCH_RUN, "variables": {"executionParams": params}},
                    timeout=self._timeout,
                )
        except (requests.ConnectionError, requests.Timeout):
            raise DagsterUnavailableError(
                f"cannot reach the Dagster webserver at {self.url}; start it with `dagster dev` "
                f"(or `dagster-webserver -w workspace.yaml`), or point {DAGSTER_URL_ENV} at it"
            ) from None
        return self._run_id(answer)

    def _run_id(self, answer: requests.Response) -> str:
        try:
            body: Any = answer.json()
        except ValueError:
            raise self._failed(f"HTTP {answer.status_code}, not a GraphQL answer") from None
        launched = (body.get("data") or {}).get("launchRun") if isinstance(body, dict) else None
        if not isinstance(launched, dict):
            errors = body.get("errors") if isinstance(body, dict) else None
            reason = "; ".join(str(error.get("message")) for error in errors) if errors else "no launchRun answer"
            raise self._failed(f"HTTP {answer.status_code}: {reason}")
        if launched["__typename"] == "LaunchRunSuccess":
            return str(launched["run"]["runId"])
        if launched["__typename"] == "RunConfigValidationInvalid":
            reason = "; ".join(error["message"] for error in launched["errors"])
        else:
            reason = launched.get("message") or "no reason given"
        raise self._failed(f"{launched['__typename']}: {reason}")

    def _failed(self, reason: str) -> LaunchFailedError:
        return LaunchFailedError(
            f"the Dagster webserver at {self.url} did not launch the run ({reason}); "
            f"check that it loads the {CODE_LOCATION} code location under that name (workspace.yaml)"
        )


def launch_pipeline_run(
    sessions: sessionmaker[Session],
    *,
    workspace_id: int,
    pipeline_id: int,
    launcher: Launcher | None = None,
) -> str:
    """Launch a manual run of a pipeline of the workspace; return its run id.

    NotFoundError when the pipeline is not the workspace's; RunRefused (with the
    reason) when the run's own guards would stop it, or the pipeline has no enabled
    manual trigger, so no run is created.
    """
    with sessions() as session:
        catalog.get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        plan_manual_run(session, pipeline_id)
    # A pipeline disabled between this check and the run start is still refused, by crawl_results itself;
    # a manual trigger switched off meanwhile is not (the crawl step cannot tell this launch from the UI's).
    return (launcher or GraphQLLauncher())(workspace_id=workspace_id, pipeline_id=pipeline_id)
