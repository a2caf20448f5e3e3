"""Site discovery: a site crawl's config and scope, its frontier, sitemaps, and the URL source over them."""
