"""Jobs: `pipeline_run` crawls a pipeline's partition, records its page changes and, for KB pipelines, indexes it."""

import dagster as dg

from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.partitions import partition_key

TRIGGERS = ("manual", "scheduled", "webhook", "event", "connector")

pipeline_run = dg.define_asset_job(
    "pipeline_run",
    selection=[crawl_results, kb_documents, page_changes],
    # Launches from the UI carry no trigger of their own; every other launcher sets one.
    tags={"trigger": "manual"},
    description="Crawl one pipeline's URLs, record what changed and, for KB pipelines, save the pages as documents.",
)


def run_tags(*, pipeline_id: int, workspace_id: int, trigger: str) -> dict[str, str]:
    """The tags every pipeline run carries; `pipeline_id` is what the run queue limits on."""
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown trigger {trigger!r}; use one of {', '.join(TRIGGERS)}")
    return {
        "pipeline_id": partition_key(pipeline_id),
        "workspace_id": str(workspace_id),
        "trigger": trigger,
    }
