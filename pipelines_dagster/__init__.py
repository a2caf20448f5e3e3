"""Dagster-orchestrated web-crawl pipelines for a multi-workspace knowledge base."""
