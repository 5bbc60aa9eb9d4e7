"""Sample custom benchmark files (package data)."""
