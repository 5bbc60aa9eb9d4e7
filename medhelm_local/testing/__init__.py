"""Test doubles that run for real: a fake OpenAI-compatible server (used by tests and bench/)."""
