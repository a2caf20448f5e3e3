"""`pipelines-dagster`, the command line."""
