"""Where bytes and leases live: the blob store for crawl results, named locks, and retention."""
