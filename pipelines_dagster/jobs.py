"""Jobs: `pipeline_run` crawls a pipeline's partition, records its page changes and, for KB pipelines, indexes it."""

import dagster as dg

from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.assets.page_changes import page_changes
from pipelines_dagster.runs import PIPELINE_RUN_JOB, TRIGGER_TAG, UI_TRIGGER

pipeline_run = dg.define_asset_job(
    PIPELINE_RUN_JOB,
    selection=[crawl_results, kb_documents, page_changes],
    # Launches from the UI carry no trigger of their own; every other launcher sets one.
    tags={TRIGGER_TAG: UI_TRIGGER.value},
    description="Crawl one pipeline's URLs, record what changed and, for KB pipelines, save the pages as documents.",
)
