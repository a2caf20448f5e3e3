"""The run contract: the tags every pipeline run carries, and the triggers that start runs."""

from collections.abc import Mapping

from pipelines_dagster.partitions import partition_key

TRIGGERS = ("manual", "scheduled", "webhook", "event", "connector")
# What a launch from the Dagster UI is: the asset page, the asset graph, a job's launchpad, a
# backfill or a re-execution. The run's own Dagster tags say which (e.g. dagster/backfill).
UI_TRIGGER = "manual"


def checked_trigger(trigger: str) -> str:
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown trigger {trigger!r}; use one of {', '.join(TRIGGERS)}")
    return trigger


def run_tags(*, pipeline_id: int, workspace_id: int, trigger: str) -> dict[str, str]:
    """The tags every pipeline run carries; `pipeline_id` is what the run queue limits on."""
    return {
        "pipeline_id": partition_key(pipeline_id),
        "workspace_id": str(workspace_id),
        "trigger": checked_trigger(trigger),
    }


def missing_run_tags(tags: Mapping[str, str], *, pipeline_id: int, workspace_id: int) -> dict[str, str]:
    """The contract's tags a run of the pipeline lacks: all of them for a launch from the Dagster UI,
    which carries only its partition; none for our own launchers. A tag the run has is kept."""
    contract = run_tags(pipeline_id=pipeline_id, workspace_id=workspace_id, trigger=UI_TRIGGER)
    return {key: value for key, value in contract.items() if key not in tags}
