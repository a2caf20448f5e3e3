"""The code location Dagster loads: the one Definitions object of this project."""

from __future__ import annotations

import dagster as dg

from pipelines_dagster.assets.crawl_results import crawl_results
from pipelines_dagster.assets.kb_documents import kb_documents
from pipelines_dagster.jobs import pipeline_run
from pipelines_dagster.resources import build_resources
from pipelines_dagster.settings import load_settings

# Settings are read at load time so a bad PIPELINES_* value fails the code location
# with the SettingsError that names it, not the first run that touches a resource.
defs = dg.Definitions(
    assets=[crawl_results, kb_documents],
    jobs=[pipeline_run],
    resources=build_resources(load_settings()),
)
