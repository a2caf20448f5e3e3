"""What runs in the extraction worker processes (page to markdown, links), and the pool that feeds them."""
