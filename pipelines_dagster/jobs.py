"""Jobs: `pipeline_run` crawls a pipeline's partition, records its page changes and, for KB pipelines, indexes it."""

from collections.abc import Iterable, Mapping

import dagster as dg

from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.runs import UI_TRIGGER, checked_trigger

pipeline_run = dg.define_asset_job(
    "pipeline_run",
    selection=[crawl_results, kb_documents, page_changes],
    # Launches from the UI carry no trigger of their own; every other launcher sets one.
    tags={"trigger": UI_TRIGGER},
    description="Crawl one pipeline's URLs, record what changed and, for KB pipelines, save the pages as documents.",
)


# A batch run (`pipeline_batch`) carries a tag for each pipeline and workspace it covers, so the run
# history of either finds it by tag, as it finds a single run by its pipeline_id and workspace_id.
# They live under the prefix Dagster's UI hides: an index, not something to read on every run row,
# which shows the `pipelines` summary instead.
MEMBER = "member"
# Dagster allows one namespace in a tag key, so the rest is dotted.
_MEMBER_PIPELINE_PREFIX = ".dagster/pipelines_dagster.pipeline."
_MEMBER_WORKSPACE_PREFIX = ".dagster/pipelines_dagster.workspace."
PIPELINES_SHOWN = 5


def member_pipeline_tag(pipeline_id: int) -> str:
    return f"{_MEMBER_PIPELINE_PREFIX}{pipeline_id}"


def member_workspace_tag(workspace_id: int) -> str:
    return f"{_MEMBER_WORKSPACE_PREFIX}{workspace_id}"


def batch_tags(members: Iterable[tuple[int, int]], *, trigger: str) -> dict[str, str]:
    """The tags of a batch run over (pipeline id, workspace id) pairs."""
    members = list(members)
    shown = ", ".join(str(pipeline_id) for pipeline_id, _ in members[:PIPELINES_SHOWN])
    more = len(members) - PIPELINES_SHOWN
    tags = {"trigger": checked_trigger(trigger), "pipelines": f"{shown} and {more} more" if more > 0 else shown}
    for pipeline_id, workspace_id in members:
        tags[member_pipeline_tag(pipeline_id)] = MEMBER
        tags[member_workspace_tag(workspace_id)] = MEMBER
    return tags


def batch_pipeline_ids(tags: Mapping[str, str]) -> list[int]:
    """The pipelines a batch run covers, from its tags."""
    return sorted(
        int(key.removeprefix(_MEMBER_PIPELINE_PREFIX))
        for key, value in tags.items()
        if key.startswith(_MEMBER_PIPELINE_PREFIX) and value == MEMBER and key[len(_MEMBER_PIPELINE_PREFIX):].isdigit()
    )
