"""The GraphQL mutations the Dagster UI sends to launch runs: a run, a re-execution, a backfill."""

from __future__ import annotations


def _run_launch(field: str) -> str:
    return f"""mutation($executionParams: ExecutionParams!) {{
  {field}(executionParams: $executionParams) {{
    __typename
    ... on LaunchRunSuccess {{ run {{ runId }} }}
    ... on PythonError {{ message }}
    ... on InvalidSubsetError {{ message }}
  }}
}}"""


LAUNCH = _run_launch("launchPipelineExecution")
REEXECUTE = _run_launch("launchPipelineReexecution")
BACKFILL = """mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
