"""`pipelines-dagster`: one module per command group, common.py for what they share, main.py the root."""
