"""Pages that need JavaScript: a guarded headless browser renders them, and a rule says which need it."""
