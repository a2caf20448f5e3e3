"""The asset graph, partitioned by pipeline: crawl_results feeds kb_documents."""
