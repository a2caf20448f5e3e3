"""What keeps requests and callers honest: the SSRF guard and its network policy, signing secrets, API tokens."""
