"""Aggregates over scored runs: per-benchmark scores, win-rate, macro-average."""
