"""One pipeline run: its plan (the guards, in the reference order) and its engine (locks, crawl, charge)."""
