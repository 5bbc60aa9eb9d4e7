"""95% CIs of an export's summaries: each model's win rate, macro average and category means.

Each published benchmark score is resampled over its own scored instances (the percentile bootstrap of the
leaderboard, 1000 resamples); a summary's interval is the percentile interval of the summary recomputed on every
resample. Benchmarks are resampled independently of each other (a seed per benchmark), and every model of one
benchmark with the same number of instances sees the same resampled positions, so a win rate compares rivals on
the same draws (paired, as the leaderboard's paired differences are). Only published scores take part, the same
scores the summaries are computed from: an interval says nothing about a suppressed cell.
"""

from __future__ import annotations

import numpy as np

from medhelm_local.analysis.aggregate import InstanceSeries
from medhelm_local.analysis.leaderboard import NO_UNLIKE, TIE_TOLERANCE, Unlike, WinRule, comparable
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES, benchmark_seed, bootstrap_matrix, percentile_interval

RESAMPLES = DEFAULT_RESAMPLES


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


def win_rate_intervals(draws: dict[str, dict[str, list[float]]], *, rule: WinRule = WinRule.PAPER,
                       unlike: Unlike = NO_UNLIKE) -> dict[str, tuple[float, float] | None]:
    """The CI of each model's win rate, recomputed on every resample as the leaderboard computes it under ``rule``
    (:func:`~medhelm_local.analysis.leaderboard.win_rate`): a win when the score beats the rival's, a tie (equal up
    to ``TIE_TOLERANCE``) a win for both (MedHELM's rule) or half a win (HELM's); the paper's rate over all
    (benchmark, rival) pairs, HELM's the mean of the per-benchmark fractions; pairs in ``unlike`` (runs not
    comparable) left out, as the win rate leaves them out."""
    tie = 0.5 if rule == WinRule.HELM else 1.0
    arrays = {m: {b: np.array(v, dtype=float) for b, v in own.items()} for m, own in draws.items()}
    out: dict[str, tuple[float, float] | None] = {}
    for model, own in arrays.items():
        fractions: list[tuple[np.ndarray, int]] = []  # per benchmark: wins on each resample, rivals
        for benchmark, values in own.items():
            wins: np.ndarray | None = None
            rivals = 0
            for rival, theirs in arrays.items():
                if rival != model and benchmark in theirs and comparable(unlike, benchmark, model, rival):
                    rival_values = theirs[benchmark]
                    equal = np.abs(values - rival_values) <= TIE_TOLERANCE
                    won = (values > rival_values) * ~equal + tie * equal
                    wins = won if wins is None else wins + won
                    rivals += 1
            if wins is not None:
                fractions.append((wins, rivals))
        if not fractions:
            out[model] = None
        elif rule == WinRule.HELM:
            out[model] = percentile_interval(np.mean([wins / rivals for wins, rivals in fractions], axis=0))
        else:
            out[model] = percentile_interval(np.sum([w for w, _ in fractions], axis=0) / sum(r for _, r in fractions))
    return out
