"""The GraphQL the Dagster UI sends: to launch runs (a run, a re-execution, a backfill), to read and stop a schedule."""

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
SCHEDULE_STATE = """query($selector: ScheduleSelector!) {
  scheduleOrError(scheduleSelector: $selector) {
    __typename
    ... on Schedule { id scheduleState { id selectorId status } }
    ... on PythonError { message }
  }
}"""
STOP_SCHEDULE = """mutation($id: String) {
  stopRunningSchedule(id: $id) {
    __typename
    ... on ScheduleStateResult { scheduleState { status } }
    ... on PythonError { message }
  }
}"""
