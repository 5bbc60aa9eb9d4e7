"""95% CIs of an export's summaries: each model's win rate, macro average and category means.

Each published benchmark score is resampled over its own scored instances (the percentile bootstrap of the
leaderboard, 1000 resamples); a summary's interval is the percentile interval of the summary recomputed on every
resample. Benchmarks are resampled independently of each other (a seed per benchmark), and every model of one
benchmark with the same number of instances sees the same resampled positions, so a win rate compares rivals on
the same draws (paired, as the leaderboard's paired differences are). Only published scores take part, the same
scores the summaries are computed from: an interval says nothing about a suppressed cell.
"""

from __future__ import annotations

import hashlib

import numpy as np

from medhelm_local.analysis.aggregate import InstanceSeries
from medhelm_local.analysis.leaderboard import TIE_TOLERANCE
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES, bootstrap_matrix, percentile_interval

RESAMPLES = DEFAULT_RESAMPLES


def benchmark_seed(benchmark: str) -> int:
    """A seed of the benchmark's own (stable across runs and exports): benchmarks are resampled independently."""
    return int.from_bytes(hashlib.sha256(benchmark.encode("utf-8")).digest()[:4], "big")


def replicates(series: InstanceSeries) -> list[float] | None:
    """The benchmark statistic on each bootstrap resample of the scored instances (None: fewer than two)."""
    if len(series.values) < 2:
        return None
    counts = series.counts[None] if series.counts is not None else None
    return [float(v) for v in bootstrap_matrix(series.values[None], counts, series.aggregation, resamples=RESAMPLES,
                                               seed=benchmark_seed(series.benchmark))[0]]


def mean_interval(draws: list[list[float]]) -> tuple[float, float] | None:
    """The CI of an equally weighted mean of benchmark scores (macro average, category mean)."""
    if not draws:
        return None
    return percentile_interval(np.mean(np.array(draws, dtype=float), axis=0))


def win_rate_intervals(draws: dict[str, dict[str, list[float]]], *, tie: float = 1.0
                       ) -> dict[str, tuple[float, float] | None]:
    """The CI of each model's win rate over the (benchmark, rival) pairs where both have a score, recomputed on
    every resample: a win when the score beats the rival's, ``tie`` for an equal score (1: MedHELM's rule, a tie
    is a win for both; 0.5: HELM's), equal up to the leaderboard's ``TIE_TOLERANCE`` as in its win rate."""
    arrays = {m: {b: np.array(v, dtype=float) for b, v in own.items()} for m, own in draws.items()}
    out: dict[str, tuple[float, float] | None] = {}
    for model, own in arrays.items():
        wins: np.ndarray | None = None
        pairs = 0
        for benchmark, values in own.items():
            for rival, theirs in arrays.items():
                if rival != model and benchmark in theirs:
                    rival_values = theirs[benchmark]
                    equal = np.abs(values - rival_values) <= TIE_TOLERANCE
                    won = (values > rival_values) * ~equal + tie * equal
                    wins = won if wins is None else wins + won
                    pairs += 1
        out[model] = percentile_interval(wins / pairs) if wins is not None and pairs else None
    return out
