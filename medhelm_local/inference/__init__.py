"""One OpenAI-compatible chat client for every backend, the egress allowlist, and the embedded server."""
