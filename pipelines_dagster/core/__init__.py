"""Plain domain code, free of Dagster: storage, locks, billing, validation."""
