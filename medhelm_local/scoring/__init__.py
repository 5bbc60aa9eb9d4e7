"""Scoring: per-instance metrics for closed answers (and, later, the LLM jury for open text)."""
