"""The run contract: the tags every pipeline run carries, and the triggers that start runs."""

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

