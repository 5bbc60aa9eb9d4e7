"""Aggregates over scored runs: per-benchmark scores with bootstrap CIs, win-rate (paper rule by default, HELM's
selectable), win SD, macro-average, per-category means, MDE, paired differences, cost-performance, and the
jury's agreement with clinicians (:mod:`.agreement`)."""
