"""Statistics of the leaderboard and of jury validation, vectorised with numpy.

- :func:`bootstrap_ci`: percentile bootstrap 95% CI of a benchmark statistic (mean or micro-F1);
- :func:`paired_bootstrap_diff`: CI of the difference between two models on their common instances, the same
  resampled instances for both (paired);
- :func:`mde`: MedHELM Appendix E minimum detectable effect of a benchmark (alpha 0.05, power 0.8);
- :func:`icc3k`, :func:`zscore`: ICC(3,k) (two-way mixed, consistency, average of k raters) for jury validation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from statistics import NormalDist

import numpy as np

from medhelm_local.scoring.metrics import Aggregation

CI_LEVEL = 0.95
DEFAULT_RESAMPLES = 1000
_CHUNK_CELLS = 2_000_000  # resample index cells per batch, to bound memory
# Values this close (relative to their size, at least 1) are equal: the mean of n copies of 10/3 is 1 ulp off 10/3,
# so a spread computed from it is ~1e-16, not 0, for data that have none.
FLOAT_NOISE = 1e-12


def _no_spread(spread: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """Where a spread (max - min) is float noise relative to the values' magnitude: there is no spread at all."""
    result: np.ndarray = ~(spread > FLOAT_NOISE * np.maximum(magnitude, 1.0))
    return result


def _resample_batches(n: int, resamples: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    per_batch = max(1, _CHUNK_CELLS // max(n, 1))
    done = 0
    while done < resamples:
        size = min(per_batch, resamples - done)
        yield rng.integers(0, n, size=(size, n))
        done += size


def _weight_batches(n: int, resamples: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Bootstrap resamples as weights: row b counts how often each of the n instances was drawn."""
    for index in _resample_batches(n, resamples, rng):
        size = index.shape[0]
        flat = (index + (np.arange(size) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=size * n).reshape(size, n).astype(float)


def bootstrap_matrix(values: np.ndarray, counts: np.ndarray | None = None,
                     aggregation: Aggregation = Aggregation.MEAN, *, resamples: int = DEFAULT_RESAMPLES,
                     seed: int = 0) -> np.ndarray:
    """Bootstrap statistics of several models on the same n instances, all from the same resamples (paired).

    ``values``: (models, n); ``counts``: (models, n, 3) tp/fp/fn for micro-F1. Returns (models, resamples).
    The resamples depend only on (n, resamples, seed), so a model's CI is the same alone or with rivals.
    """
    n = values.shape[1]
    rng = np.random.default_rng(seed)
    parts = []
    for weights in _weight_batches(n, resamples, rng):
        if aggregation == Aggregation.MICRO_F1 and counts is not None:
            sums = np.einsum("bn,mnk->mbk", weights, counts)
            tp, fp, fn = sums[..., 0], sums[..., 1], sums[..., 2]
            denominator = 2 * tp + fp + fn
            parts.append(np.where(denominator == 0, 1.0, 2 * tp / np.where(denominator == 0, 1, denominator)))
        else:
            parts.append(values @ weights.T / n)
    return np.concatenate(parts, axis=1)


def percentile_interval(samples: np.ndarray) -> tuple[float, float]:
    alpha = (1 - CI_LEVEL) / 2
    low, high = np.quantile(samples, [alpha, 1 - alpha])
    return float(low), float(high)



def spread(values: list[float]) -> float | None:
    """Population SD (ddof 0) of ``values``; None for fewer than two: an SD of one value is undefined, not 0."""
    return float(np.std(values)) if len(values) >= 2 else None


def benchmark_seed(benchmark: str, seed: int = 0) -> int:
    """The bootstrap seed of a benchmark's own (stable across runs and exports): benchmarks are resampled
    independently, and a score's CI and every summary over it (category mean, macro average, win rate) draw the same
    resamples, so a summary over that one score has the score's own interval."""
    return (int.from_bytes(hashlib.sha256(benchmark.encode("utf-8")).digest()[:4], "big") + seed) % 2**32


def bootstrap_ci(values: np.ndarray, counts: np.ndarray | None = None, aggregation: Aggregation = Aggregation.MEAN,
                 *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap CI over instances; None for fewer than two instances."""
    if len(values) < 2 or resamples < 1:
        return None
    stacked_counts = counts[None] if counts is not None else None
    return percentile_interval(bootstrap_matrix(values[None], stacked_counts, aggregation, resamples=resamples,
                                                seed=seed)[0])


def paired_bootstrap_diff(a: np.ndarray, b: np.ndarray, counts_a: np.ndarray | None = None,
                          counts_b: np.ndarray | None = None, aggregation: Aggregation = Aggregation.MEAN, *,
                          resamples: int = DEFAULT_RESAMPLES, seed: int = 0
                          ) -> tuple[float, tuple[float, float] | None]:
    """``(difference a - b, CI)`` on aligned common instances; both models see the same resampled instances."""
    n = len(a)
    if n == 0:
        raise ValueError("no common instances")
    from medhelm_local.analysis.aggregate import statistic

    sa, sb = statistic(a, counts_a, aggregation), statistic(b, counts_b, aggregation)
    assert sa is not None and sb is not None
    if n < 2 or resamples < 1:
        return sa - sb, None
    counts = np.stack([counts_a, counts_b]) if counts_a is not None and counts_b is not None else None
    stats = bootstrap_matrix(np.stack([a, b]), counts, aggregation, resamples=resamples, seed=seed)
    return sa - sb, percentile_interval(stats[0] - stats[1])


def mde_multiplier(alpha: float = 0.05, power: float = 0.8) -> float:
    """z_(1-alpha/2) + z_(power): 1.95996 + 0.84162 = 2.80158 for the paper's alpha 0.05 and power 0.8."""
    standard = NormalDist()
    return standard.inv_cdf(1 - alpha / 2) + standard.inv_cdf(power)


def pair_mde(differences: np.ndarray, *, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """One pair's MDE: (z_(1-a/2) + z_(1-b)) * sd(per-instance difference) / sqrt(n). Needs n >= 2."""
    n = len(differences)
    if n < 2:
        return None
    return mde_multiplier(alpha, power) * float(np.std(differences, ddof=1)) / float(np.sqrt(n))


def mde(pair_differences: list[np.ndarray], *, alpha: float = 0.05, power: float = 0.8
        ) -> tuple[float, float | None, int] | None:
    """Appendix E: the mean over model pairs of the pair MDE, its SD over pairs (ddof 0; None for one pair) and the
    number of pairs."""
    values = [v for v in (pair_mde(d, alpha=alpha, power=power) for d in pair_differences) if v is not None]
    if not values:
        return None
    return float(np.mean(values)), spread(values), len(values)


def zscore(values: np.ndarray) -> np.ndarray | None:
    """Standardise one rater's scores (ddof 1); None when the rater gave the same score throughout."""
    if len(values) < 2:
        return None
    if _no_spread(np.ptp(values), np.max(np.abs(values))):  # a constant rater's sd is float noise, not always 0
        return None
    sd = float(np.std(values, ddof=1))
    if sd == 0 or not np.isfinite(sd):
        return None
    result: np.ndarray = (values - values.mean()) / sd
    return result


def icc3k(matrix: np.ndarray) -> np.ndarray:
    """ICC(3,k) of ratings ``(..., n cases, k raters)``: (MS_cases - MS_error) / MS_cases (Shrout & Fleiss).

    Vectorised over leading axes (bootstrap batches). NaN where MS_cases is 0 or n < 2. MS_cases is 0 when every
    case has the same mean (a bootstrap resample drawing one case n times): computed, it is float noise (1e-33)
    and the ratio of two noises is any number at all, so it is decided on the spread of the case means.
    """
    n, k = matrix.shape[-2], matrix.shape[-1]
    grand = matrix.mean(axis=(-2, -1), keepdims=True)
    row_means = matrix.mean(axis=-1, keepdims=True)
    col_means = matrix.mean(axis=-2, keepdims=True)
    ss_rows = k * ((row_means - grand) ** 2).sum(axis=(-2, -1))
    ss_cols = n * ((col_means - grand) ** 2).sum(axis=(-2, -1))
    ss_total = ((matrix - grand) ** 2).sum(axis=(-2, -1))
    ss_error = ss_total - ss_rows - ss_cols
    case_means = row_means[..., 0]
    constant = _no_spread(np.ptp(case_means, axis=-1), np.abs(matrix).max(axis=(-2, -1)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ms_rows = ss_rows / (n - 1)
        ms_error = ss_error / ((n - 1) * (k - 1))
        result: np.ndarray = np.where((ms_rows > 0) & ~constant, (ms_rows - ms_error) / ms_rows, np.nan)
    return result


def icc3k_with_ci(matrix: np.ndarray, *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
                  ) -> tuple[float | None, tuple[float, float] | None]:
    """ICC(3,k) of an ``(n, k)`` matrix and a bootstrap CI over cases (degenerate resamples dropped)."""
    n = matrix.shape[0]
    if n < 2:
        return None, None
    point = float(icc3k(matrix))
    if not np.isfinite(point):
        return None, None
    if n < 3 or resamples < 1:
        return point, None
    rng = np.random.default_rng(seed)
    samples = np.concatenate([icc3k(matrix[index]) for index in _resample_batches(n, resamples, rng)])
    samples = samples[np.isfinite(samples)]
    return point, (percentile_interval(samples) if len(samples) else None)


def mean_with_ci(values: np.ndarray, *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
                 ) -> tuple[float | None, tuple[float, float] | None]:
    if len(values) == 0:
        return None, None
    return float(values.mean()), bootstrap_ci(values, resamples=resamples, seed=seed)
