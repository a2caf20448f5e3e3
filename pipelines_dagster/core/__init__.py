"""Plain domain code, free of Dagster, FastAPI and click: one subpackage per concern, tested directly."""
