"""The HTTP API of the pipelines: workspace-scoped pipelines, run-now, run history and crawl results."""

from pipelines_dagster.api.app import create_app

__all__ = ["create_app"]
