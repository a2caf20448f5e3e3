"""The knowledge base a crawl feeds: documents indexed and archived, and the page-change timeline."""
