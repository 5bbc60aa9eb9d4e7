"""The encrypted DuckDB store: instances, requests, responses, scores and runs."""

from medhelm_local.store.store import Store

__all__ = ["Store"]
