"""Run a pipeline now: refuse what its guards (and its manual trigger) refuse, then launch `pipeline_run` on Dagster.

The launch goes through the Dagster webserver's GraphQL API, so the run lands in
the deployment's own queue (and its one-run-per-pipeline limit) like a UI launch.
A pipeline with a run queued or in progress (its own, a UI launch of its partition,
or a batch run that covers it) is refused with the run's id: a user asking to run
it now learns it is already running, instead of a second run starting after it.
The HTTP API's `POST .../run` and `pipelines-dagster pipeline run` both use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import requests
from sqlalchemy.orm import Session, sessionmaker

from pipelines_dagster.core.catalog.pipelines import get_pipeline
from pipelines_dagster.core.run.plan import RunRefused, plan_manual_run
from pipelines_dagster.runs import (
    BUSY_STATUSES,
    CODE_LOCATION,
    MEMBER,
    PARTITION_TAG,
    PIPELINE_RUN_JOB,
    PIPELINE_TAG,
    REPOSITORY,
    Trigger,
    member_pipeline_tag,
    run_tags,
)
from pipelines_dagster.settings import DAGSTER_URL_ENV, load_settings

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


# A pipeline's runs queued or in progress, under each tag a run for it carries: its own runs'
# pipeline_id, a UI launch's partition, a batch run's member tag; one request.
BUSY_RUNS = """query(
  $statuses: [RunStatus!], $own: [ExecutionTag!], $partition: [ExecutionTag!], $member: [ExecutionTag!]
) {
  own: runsOrError(filter: {statuses: $statuses, tags: $own}) { ...found }
  partition: runsOrError(filter: {statuses: $statuses, tags: $partition}) { ...found }
  member: runsOrError(filter: {statuses: $statuses, tags: $member}) { ...found }
}
fragment found on RunsOrError {
  __typename
  ... on Runs { results { runId status jobName } }
  ... on PythonError { message }
}"""


class PipelineBusyError(RunRefused):
    """Run-now on a pipeline with a run queued or in progress: refused, naming that run."""

    def __init__(self, pipeline_id: int, run: BusyRun) -> None:
        super().__init__(
            f"pipeline {pipeline_id} is busy: run {run.run_id} ({run.job_name}, {run.status.lower()}) is running "
            "it, so no second run is started; wait for that run to end (GET .../runs/"
            f"{run.run_id}, or the Dagster UI), or let a trigger fire, which runs after it"
        )
        self.run_id = run.run_id


@dataclass(frozen=True)
class BusyRun:
    run_id: str
    status: str
    job_name: str


class DagsterUnavailableError(RuntimeError):
    """The Dagster webserver cannot be reached; the message says what to start."""


class LaunchFailedError(RuntimeError):
    """The webserver answered but did not launch the run; the message carries its reason."""


class Launcher(Protocol):
    def __call__(
        self, *, workspace_id: int, pipeline_id: int, partition_key: str, pipeline_name: str | None = None
    ) -> str:
        """Launch the pipeline's `pipeline_run` for its partition (`partition_key`) with the manual trigger (and
        its name in its tags); return the run id."""
        ...

    def busy_run(self, pipeline_id: int, partition_key: str) -> BusyRun | None:
        """A run queued or in progress for the pipeline (whose partition is `partition_key`), if there is one."""
        ...


class GraphQLLauncher:
    """Submits `pipeline_run` for one pipeline's partition to a Dagster webserver."""

    def __init__(self, url: str | None = None, *, timeout: int = LAUNCH_TIMEOUT_SECONDS) -> None:
        """`url`: the webserver's; the settings' PIPELINES_DAGSTER_URL (checked when read) by default."""
        self.url = (url or load_settings().launch_url).rstrip("/")
        self._timeout = timeout

    def __call__(
        self, *, workspace_id: int, pipeline_id: int, partition_key: str, pipeline_name: str | None = None
    ) -> str:
        tags = {
            **run_tags(
                pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=Trigger.MANUAL, pipeline_name=pipeline_name
            ),
            PARTITION_TAG: partition_key,
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
        return self._run_id(self._ask(LAUNCH_RUN, {"executionParams": params}, "launchRun"))

    def busy_run(self, pipeline_id: int, partition_key: str) -> BusyRun | None:
        def tag(key: str, value: str) -> list[dict[str, str]]:
            return [{"key": key, "value": value}]

        variables = {
            "statuses": list(BUSY_STATUSES),
            "own": tag(PIPELINE_TAG, str(pipeline_id)),
            "partition": tag(PARTITION_TAG, partition_key),
            "member": tag(member_pipeline_tag(pipeline_id), MEMBER),
        }
        answer = self._ask(BUSY_RUNS, variables, "own", "partition", "member")
        found: list[BusyRun] = []
        for name, runs in answer.items():
            if runs.get("__typename") != "Runs":
                raise self._failed(f"{name}: {runs.get('__typename')}: {runs.get('message') or 'no runs'}")
            found += [BusyRun(run["runId"], run["status"], run["jobName"]) for run in runs["results"]]
        # Newest first from each; a started run before a queued one, as the one to name.
        found.sort(key=lambda run: run.status == "QUEUED")
        return found[0] if found else None

    def _ask(self, query: str, variables: dict[str, Any], *fields: str) -> dict[str, Any]:
        """The named fields of a GraphQL answer, each a dict; the errors say why one is missing."""
        try:
            # A session each: launches from many threads at once share nothing.
            with requests.Session() as session:
                answer = session.post(
                    f"{self.url}/graphql", json={"query": query, "variables": variables}, timeout=self._timeout
                )
        except (requests.ConnectionError, requests.Timeout):
            raise DagsterUnavailableError(
                f"cannot reach the Dagster webserver at {self.url}; start it with `dagster dev` "
                f"(or `dagster-webserver -w workspace.yaml`), or point {DAGSTER_URL_ENV} at it"
            ) from None
        try:
            body: Any = answer.json()
        except ValueError:
            raise self._failed(f"HTTP {answer.status_code}, not a GraphQL answer") from None
        data = (body.get("data") or {}) if isinstance(body, dict) else {}
        if not all(isinstance(data.get(name), dict) for name in fields):
            errors = body.get("errors") if isinstance(body, dict) else None
            reason = "; ".join(str(error.get("message")) for error in errors) if errors else f"no {fields[0]} answer"
            raise self._failed(f"HTTP {answer.status_code}: {reason}")
        return {name: data[name] for name in fields}

    def _run_id(self, answer: dict[str, Any]) -> str:
        launched = answer["launchRun"]
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
    manual trigger, and PipelineBusyError when a run of it is queued or in progress,
    so no run is created.
    """
    with sessions() as session:
        pipeline = get_pipeline(session, workspace_id=workspace_id, pipeline_id=pipeline_id)
        name, key = pipeline.name, pipeline.partition
        plan_manual_run(session, pipeline_id)
    launch = launcher or GraphQLLauncher()
    if (busy := launch.busy_run(pipeline_id, key)) is not None:
        raise PipelineBusyError(pipeline_id, busy)
    # A pipeline disabled between this check and the run start is still refused, by crawl_results itself;
    # a manual trigger switched off meanwhile is not (the crawl step cannot tell this launch from the UI's).
    # A run started for it meanwhile queues this one behind it, or this one waits for its locks.
    return launch(workspace_id=workspace_id, pipeline_id=pipeline_id, partition_key=key, pipeline_name=name)
