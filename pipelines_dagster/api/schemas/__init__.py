"""The HTTP API's request and response bodies as pydantic models, one module per noun; no web framework here."""
