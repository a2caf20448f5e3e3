"""What runs in the extraction worker processes (pages and documents to markdown, links), and the pool feeding them."""
