"""The crawler: polite, guarded fetching of URLs into outcomes and crawl records, and how a crawl is judged."""
