"""The HTTP edge the API and the MCP server share: request limits, and the uvicorn server that enforces them."""
