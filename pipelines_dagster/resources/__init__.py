"""Dagster resources: thin shells wiring core/ to a deployment; `deployment` picks their backends."""
