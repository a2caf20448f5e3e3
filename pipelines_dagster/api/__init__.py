"""The HTTP API of the pipelines: workspace-scoped pipelines, run-now, run history and crawl results."""
