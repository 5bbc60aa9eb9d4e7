"""Win-rate, win SD, MDE, bootstrap CIs and ICC(3,k) checked against hand-computed examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medhelm_local.analysis.aggregate import InstanceSeries
from medhelm_local.analysis.leaderboard import (
    WinRule,
    benchmark_mdes,
    build_leaderboard,
    pairwise_differences,
    win_pairings,
    win_rate,
    win_sd,
)
from medhelm_local.analysis.stats import (
    bootstrap_ci,
    icc3k,
    mde,
    mde_multiplier,
    pair_mde,
    paired_bootstrap_diff,
    zscore,
)
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.records import BenchmarkScore
from medhelm_local.scoring.metrics import Aggregation

# b1: M1 0.8, M2 0.6, M3 0.8 (a tie at the top); b2: M1 0.5, M2 0.5, M3 0.2 (a tie at the top)
SCORES = {"M1": {"b1": 0.8, "b2": 0.5}, "M2": {"b1": 0.6, "b2": 0.5}, "M3": {"b1": 0.8, "b2": 0.2}}


def test_win_rate_paper_rule_counts_ties_as_wins() -> None:
    # M1: beats/ties everyone on both -> 4/4. M2: loses both on b1, ties M1 and beats M3 on b2 -> 2/4.
    # M3: ties M1 and beats M2 on b1, loses both on b2 -> 2/4.
    assert win_rate(SCORES, "M1") == 1.0
    assert win_rate(SCORES, "M2") == 0.5
    assert win_rate(SCORES, "M3") == 0.5
    # per-benchmark win fractions: M1 [1, 1], M2 [0, 1], M3 [1, 0]
    assert win_sd(SCORES, "M1") == 0.0
    assert win_sd(SCORES, "M2") == 0.5
    assert win_sd(SCORES, "M3") == 0.5


def test_win_rate_helm_rule_half_a_win_for_ties() -> None:
    # M1: b1 1 + 0.5, b2 0.5 + 1 -> 3/4; M2: b1 0 + 0, b2 0.5 + 1 -> 1.5/4; M3: b1 0.5 + 1, b2 0 -> 1.5/4
    assert win_rate(SCORES, "M1", WinRule.HELM) == 0.75
    assert win_rate(SCORES, "M2", WinRule.HELM) == 0.375
    assert win_rate(SCORES, "M3", WinRule.HELM) == 0.375


def test_win_rate_only_over_shared_benchmarks() -> None:
    scores = {"A": {"b1": 0.9, "b2": 0.1}, "B": {"b1": 0.5}}
    assert win_rate(scores, "A") == 1.0  # b2 has no rival
    assert win_rate(scores, "B") == 0.0


def test_build_leaderboard_rows() -> None:
    results = [BenchmarkScore(model=m, benchmark=b, metric="exact_match", score=s, n=10)
               for m, per in SCORES.items() for b, s in per.items()]
    rows = build_leaderboard(results, specs=SHIPPED)
    assert [r.model for r in rows] == ["M1", "M2", "M3"]  # M2 and M3 tie on win-rate; macro 0.55 > 0.5
    first = rows[0]
    assert (first.win_rate, first.win_sd, first.macro_avg) == (1.0, 0.0, pytest.approx(0.65))
    assert first.sd == pytest.approx(0.15)  # population SD of [0.8, 0.5]
    assert first.win_rule == WinRule.PAPER
    helm = build_leaderboard(results, specs=SHIPPED, rule=WinRule.HELM)
    assert helm[0].win_rate == 0.75
    single = build_leaderboard([results[0]], specs=SHIPPED)
    assert single[0].win_rate is None and single[0].macro_avg == 0.8


def test_a_pairing_of_unlike_runs_is_no_win_and_no_loss_under_either_rule() -> None:
    """M3's run of b2 is not comparable with M1's (another dataset version, spec or sample): the win rates counted
    M1's win over M3 there and M3's loss, as if the two runs had measured the same thing."""
    from medhelm_local.export.intervals import win_rate_intervals

    unlike = {("M1", "b2"): {"M3": ["dataset version"]}, ("M3", "b2"): {"M1": ["dataset version"]}}
    # M1: b1 ties M3, beats M2; b2 ties M2 (M3 left out) -> 3/3. M3: b1 2/2; b2 loses to M2 -> 2/3 (was 2/4)
    assert win_rate(SCORES, "M3", unlike=unlike) == 2 / 3
    assert win_rate(SCORES, "M1", unlike=unlike) == 1.0
    assert win_rate(SCORES, "M2", unlike=unlike) == 0.5  # M2's pairings are all alike: unchanged
    assert win_sd(SCORES, "M3", unlike=unlike) == 0.5  # fractions [1, 0]
    # HELM: M3 b1 (0.5 + 1) / 2, b2 0 / 1 -> 0.375 either way; M1 b1 (1 + 0.5) / 2, b2 0.5 / 1 (was 0.75)
    assert win_rate(SCORES, "M1", WinRule.HELM, unlike=unlike) == 0.625
    assert win_pairings(SCORES, "M3", unlike) == (3, 1) and win_pairings(SCORES, "M2", unlike) == (4, 0)
    # a difference named on one side only still leaves the pairing out of both
    assert win_rate(SCORES, "M3", unlike={("M1", "b2"): {"M3": ["spec (max_tokens)"]}}) == 2 / 3
    # the console's win-rate CI leaves out what the win rate leaves out
    draws = {m: {b: [v] * 4 for b, v in own.items()} for m, own in SCORES.items()}
    assert win_rate_intervals(draws, unlike=unlike)["M3"] == pytest.approx((2 / 3, 2 / 3))
    # every pairing left out: no win rate at all, never 0
    apart = {("A", "b1"): {"B": ["instances (all 6 against 3 of 6 sampled with seed 0)"]}}
    assert win_rate({"A": {"b1": 0.9}, "B": {"b1": 0.1}}, "B", unlike=apart) is None
    assert win_rate_intervals({"A": {"b1": [0.9] * 2}, "B": {"b1": [0.1] * 2}}, unlike=apart)["B"] is None
    results = [BenchmarkScore(model=m, benchmark="pubmedqa", metric="exact_match", score=s, n=10)
               for m, s in (("A", 0.9), ("B", 0.1))]
    rows = {r.model: r for r in build_leaderboard(results, specs=SHIPPED,
                                                  unlike={("A", "pubmedqa"): {"B": ["dataset version"]}})}
    assert rows["B"].win_rate is None and rows["B"].win_rate_left_out
    assert (rows["B"].win_pairs, rows["B"].win_pairs_left_out) == (0, 1)


def test_paired_statistics_never_pair_runs_that_are_not_comparable() -> None:
    """A and B scored the same instances of the same dataset version, but with another spec: the paired difference
    and the MDE paired them as if their instances had measured the same thing."""
    a, b, c = series("A", [1, 0, 1, 1]), series("B", [0, 0, 1, 0]), series("C", [1, 1, 1, 0])
    unlike = {("A", "pubmedqa"): {"B": ["spec (prompt.template)"]},
              ("B", "pubmedqa"): {"A": ["spec (prompt.template)"]}}
    assert {(d.model, d.rival) for d in pairwise_differences([a, b], resamples=0)} == {("A", "B"), ("B", "A")}
    assert pairwise_differences([a, b], resamples=0, unlike=unlike) == []
    kept = pairwise_differences([a, b, c], resamples=50, unlike=unlike)
    assert {(d.model, d.rival) for d in kept} == {("A", "C"), ("C", "A"), ("B", "C"), ("C", "B")}
    assert benchmark_mdes([a, b], unlike=unlike) == {}
    assert benchmark_mdes([a, b, c], unlike=unlike)["pubmedqa"].pairs == 2


def test_mde_hand_computed() -> None:
    assert mde_multiplier() == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    a = np.array([1.0, 0.0, 1.0, 1.0])
    b = np.array([0.0, 0.0, 1.0, 0.0])
    # differences [1, 0, 0, 1]: sd (ddof 1) = sqrt(1/3), n = 4 -> 2.801585 * 0.57735 / 2 = 0.808749
    assert pair_mde(a - b) == pytest.approx(2.801585 * math.sqrt(1 / 3) / 2, abs=1e-5)
    c = np.array([1.0, 1.0, 1.0, 0.0])
    pairs = [a - b, a - c, b - c]
    expected = [2.801585 * np.std(d, ddof=1) / 2 for d in pairs]
    result = mde(pairs)
    assert result is not None
    assert result[0] == pytest.approx(np.mean(expected), abs=1e-5)
    assert result[1] == pytest.approx(np.std(expected), abs=1e-5)
    assert result[2] == 3
    assert pair_mde(np.array([1.0])) is None


def series(model: str, values: list[float], ids: list[str] | None = None) -> InstanceSeries:
    return InstanceSeries(model=model, benchmark="pubmedqa", metric="exact_match", run_id=f"r-{model}",
                          aggregation=Aggregation.MEAN, ids=ids or [str(i) for i in range(len(values))],
                          values=np.array(values, dtype=float))


def test_benchmark_mde_and_pairwise_use_common_instances() -> None:
    a = series("A", [1, 0, 1, 1])
    b = series("B", [0, 0, 1, 0, 1], ids=["0", "1", "2", "3", "extra"])
    mdes = benchmark_mdes([a, b])
    assert mdes["pubmedqa"].mde == pytest.approx(2.801585 * math.sqrt(1 / 3) / 2, abs=1e-5)
    assert mdes["pubmedqa"].pairs == 1
    diffs = pairwise_differences([a, b], resamples=200)
    forward = next(d for d in diffs if d.model == "A")
    assert forward.n == 4 and forward.difference == pytest.approx(0.5)
    assert forward.ci_low is not None and forward.ci_high is not None
    assert forward.ci_low <= 0.5 <= forward.ci_high


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible() -> None:
    rng = np.random.default_rng(1)
    values = (rng.random(400) < 0.7).astype(float)
    low, high = bootstrap_ci(values, resamples=500, seed=3) or (0, 0)
    assert low < values.mean() < high
    # a 95% CI of a proportion near 0.7 with n = 400 is about +/- 0.045
    assert 0.06 < high - low < 0.12
    assert bootstrap_ci(values, resamples=500, seed=3) == (low, high)
    assert bootstrap_ci(np.array([1.0]), resamples=10) is None


def test_paired_bootstrap_is_paired() -> None:
    # B is A shifted by a constant on every instance: a paired CI of the difference is a single point.
    a = np.linspace(0, 1, 50)
    difference, interval = paired_bootstrap_diff(a, a - 0.1, resamples=300)
    assert difference == pytest.approx(0.1)
    assert interval is not None and interval[0] == pytest.approx(0.1) and interval[1] == pytest.approx(0.1)


# Coverage on data with a known answer: TRIALS independent samples of N instances from a known distribution,
# each with its own bootstrap seed, as the leaderboard computes one CI per benchmark. A 95% percentile bootstrap
# at N = 100 covers the true value in 94-95% of samples (slightly under 95%: plug-in variance, normal rather than
# t quantiles); the observed share may differ from that by sampling alone with SD sqrt(.95 x .05 / TRIALS), so
# the tolerance is [0.94 - 3 SD, 0.95 + 3 SD] = [0.917, 0.973] for 800 trials. A 90% or a 99% interval falls
# outside it (measured on these data: 0.88-0.90 and 0.98-1.00). Fixed seeds: the test is deterministic.
TRIALS, N, RESAMPLES = 800, 100, 500
_SD = math.sqrt(0.95 * 0.05 / TRIALS)
COVERAGE_TOLERANCE = (0.94 - 3 * _SD, 0.95 + 3 * _SD)


def _coverage(intervals: list[tuple[float, float] | None], truth: float) -> float:
    known = [interval for interval in intervals if interval is not None]
    assert len(known) == len(intervals)
    return sum(low <= truth <= high for low, high in known) / len(known)


def test_bootstrap_ci_of_a_mean_covers_the_true_mean_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(20261123)
    true_mean = 2 / 7  # Beta(2, 5): skewed scores in [0, 1], like normalised jury ratings
    intervals = [bootstrap_ci(rng.beta(2, 5, N), resamples=RESAMPLES, seed=trial) for trial in range(TRIALS)]
    low, high = COVERAGE_TOLERANCE
    assert low <= _coverage(intervals, true_mean) <= high


def test_bootstrap_ci_of_micro_f1_covers_the_true_f1_95_percent_of_the_time() -> None:
    # Per instance: tp ~ Binomial(2, 0.6), fp ~ Poisson(0.5), fn ~ Binomial(2, 0.3). The population's micro-F1
    # is 2 E[tp] / (2 E[tp] + E[fp] + E[fn]) = 2.4 / (2.4 + 0.5 + 0.6).
    rng = np.random.default_rng(20261124)
    true_f1 = 2.4 / 3.5
    intervals = []
    for trial in range(TRIALS):
        counts = np.stack([rng.binomial(2, 0.6, N), rng.poisson(0.5, N), rng.binomial(2, 0.3, N)], axis=1)
        intervals.append(bootstrap_ci(np.zeros(N), counts.astype(float), Aggregation.MICRO_F1,
                                      resamples=RESAMPLES, seed=trial))
    low, high = COVERAGE_TOLERANCE
    assert low <= _coverage(intervals, true_f1) <= high


def test_paired_bootstrap_covers_the_true_difference_95_percent_of_the_time() -> None:
    # Model B scores each instance as A does plus N(0.05, 0.1): the true mean difference B - A is 0.05, and the
    # per-instance pairing is what makes its interval narrow.
    rng = np.random.default_rng(20261125)
    intervals = []
    for trial in range(TRIALS):
        a = rng.beta(2, 5, N)
        b = a + rng.normal(0.05, 0.1, N)
        intervals.append(paired_bootstrap_diff(b, a, resamples=RESAMPLES, seed=trial)[1])
    low, high = COVERAGE_TOLERANCE
    assert low <= _coverage(intervals, 0.05) <= high


def test_icc3k_hand_computed() -> None:
    # rows (cases) x columns (raters): SS_rows = 6.3333, SS_cols = 2.6667, SS_err = 0.3333
    # MS_rows = 3.1667, MS_err = 0.1667 -> ICC(3,k) = 3 / 3.1667 = 18/19
    matrix = np.array([[1.0, 2.0], [2.0, 3.0], [3.0, 5.0]])
    assert float(icc3k(matrix)) == pytest.approx(18 / 19)
    assert float(icc3k(np.array([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]]))) == pytest.approx(1.0)
    # consistency: a constant offset between raters does not lower ICC(3,k)
    assert float(icc3k(np.array([[1.0, 2.0], [2.0, 3.0], [3.0, 4.0]]))) == pytest.approx(1.0)
    # opposite rankings: negative
    assert float(icc3k(np.array([[1.0, 3.0], [2.0, 2.5], [3.0, 1.0]]))) < 0
    # no variance between cases: undefined, not a number pretending to be one
    assert math.isnan(float(icc3k(np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]]))))
    batch = np.stack([matrix, matrix])
    assert icc3k(batch).shape == (2,)


def test_equal_jury_means_tie_whatever_the_float_rounding_of_their_sums() -> None:
    """Two models whose jury ratings have the same mean tie (a win for both under MedHELM's rule, half a win each
    under HELM's), although summing their per-instance values in another order leaves them 1e-16 apart."""
    from medhelm_local.export.intervals import win_rate_intervals
    from medhelm_local.scoring.jury import likert_unit
    from medhelm_local.scoring.summary import aggregate_values

    # each instance's rating sum over 3 judges x 3 criteria; both lists total 238 (mean rating 238 / 72)
    a = [33, 22, 15, 40, 10, 33, 36, 9]
    b = [33, 22, 13, 40, 10, 33, 36, 11]
    score_a, score_b = (aggregate_values([likert_unit(s / 9) for s in sums], None, Aggregation.MEAN)
                        for sums in (a, b))
    assert score_a is not None and score_b is not None
    assert math.isclose(score_a, score_b) and score_a != score_b  # the same mean, 1e-16 apart as floats
    scores = {"A": {"b1": score_a}, "B": {"b1": score_b}}
    assert win_rate(scores, "A") == win_rate(scores, "B") == 1.0
    assert win_rate(scores, "A", WinRule.HELM) == win_rate(scores, "B", WinRule.HELM) == 0.5
    assert win_sd(scores, "A") is None and win_sd(scores, "B") is None  # one benchmark: no SD at all
    # the console's win-rate CI recomputes the same comparison on resamples: a tie there too
    draws = {"A": {"b1": [score_a] * 3}, "B": {"b1": [score_b] * 3}}
    assert win_rate_intervals(draws) == {"A": (1.0, 1.0), "B": (1.0, 1.0)}
    assert win_rate_intervals(draws, rule=WinRule.HELM) == {"A": (0.5, 0.5), "B": (0.5, 0.5)}


def test_helms_win_rate_is_the_mean_of_per_benchmark_fractions() -> None:
    """HELM's mean win rate averages each benchmark's win fraction; --win-rule helm only halved ties, and still
    pooled every (benchmark, rival) pair as the paper does. They differ when benchmarks have different rivals: A
    beats its one rival on b1 and one of three on b2."""
    from medhelm_local.export.intervals import win_rate_intervals

    scores = {"A": {"b1": 0.9, "b2": 0.5}, "B": {"b1": 0.1, "b2": 0.9}, "C": {"b2": 0.1}, "D": {"b2": 0.8}}
    assert win_rate(scores, "A") == 2 / 4  # the paper: 2 wins over 4 (benchmark, rival) pairs
    assert win_rate(scores, "A", WinRule.HELM) == (1 + 1 / 3) / 2  # HELM: mean of 1 and 1/3 (was 0.5)
    draws = {m: {b: [v] * 4 for b, v in own.items()} for m, own in scores.items()}
    assert win_rate_intervals(draws)["A"] == (0.5, 0.5)
    low, high = win_rate_intervals(draws, rule=WinRule.HELM)["A"] or (0.0, 0.0)
    assert math.isclose(low, 2 / 3) and math.isclose(high, 2 / 3)  # the CI on the same aggregation


def _exact_icc3k(matrix: np.ndarray) -> float:
    """ICC(3,k) in exact rational arithmetic on the matrix's float values: NaN where MS_cases is exactly 0."""
    from fractions import Fraction

    rows = [[Fraction(float(v)) for v in row] for row in matrix]
    n, k = len(rows), len(rows[0])
    grand = sum(sum(row) for row in rows) / (n * k)
    row_means = [sum(row) / k for row in rows]
    col_means = [sum(row[j] for row in rows) / n for j in range(k)]
    ss_rows = k * sum((m - grand) ** 2 for m in row_means)
    ss_cols = n * sum((m - grand) ** 2 for m in col_means)
    ss_total = sum((v - grand) ** 2 for row in rows for v in row)
    if ss_rows == 0:
        return math.nan
    ms_rows, ms_error = ss_rows / (n - 1), (ss_total - ss_rows - ss_cols) / ((n - 1) * (k - 1))
    return float((ms_rows - ms_error) / ms_rows)


def test_icc3k_of_cases_with_one_mean_is_undefined_not_float_noise_over_float_noise() -> None:
    """A bootstrap resample that draws one case n times has MS_cases = 0 (ICC undefined, dropped from the CI); in
    floats MS_cases came out 1e-33 and ICC(3,k) 1.2e16, the upper end of the 95% CI."""
    from medhelm_local.analysis.stats import icc3k_with_ci

    z_a, z_b = zscore(np.array([2.0, 4.0, 5.0])), zscore(np.array([1.0, 3.0, 2.0]))
    assert z_a is not None and z_b is not None
    matrix = np.column_stack([z_a, z_b])
    assert math.isnan(float(icc3k(matrix[[2, 2, 2]])))
    assert math.isnan(float(icc3k(np.column_stack([z_a, -z_a]))))  # mirror images: every case mean is 0 (was -1e32)
    point, interval = icc3k_with_ci(matrix, resamples=1000, seed=0)
    assert point == pytest.approx(_exact_icc3k(matrix))
    draws = np.random.default_rng(0).integers(0, 3, size=(1000, 3))  # the resamples icc3k_with_ci draws
    exact = np.array([_exact_icc3k(matrix[index]) for index in draws])
    assert interval == pytest.approx(tuple(np.quantile(exact[np.isfinite(exact)], [0.025, 0.975])))
    assert interval is not None and interval[1] <= 1.0


def test_an_sd_of_fewer_than_two_values_is_undefined() -> None:
    """One benchmark (or one model pair) has no spread to measure: the SDs were 0.0, a perfect consistency that
    nothing showed. A CI from one instance is undefined as well."""
    results = [BenchmarkScore(model=m, benchmark="b1", metric="exact_match", score=s, n=10)
               for m, s in (("M1", 0.8), ("M2", 0.6))]
    rows = build_leaderboard(results, specs=SHIPPED)
    assert [(r.macro_avg, r.sd, r.win_rate, r.win_sd) for r in rows] == [(0.8, None, 1.0, None), (0.6, None, 0.0, None)]
    alone = build_leaderboard(results[:1], specs=SHIPPED)[0]
    assert alone.sd is None and alone.win_sd is None and alone.win_rate is None
    result = mde([np.array([1.0, 0.0, 1.0, 0.0])])
    assert result is not None and result[0] > 0 and result[1:] == (None, 1)
    two = mde([np.array([1.0, 0.0, 1.0, 0.0]), np.array([1.0, 1.0, 1.0, 0.0])])
    assert two is not None and two[1] is not None and two[1] > 0
    assert bootstrap_ci(np.array([1.0])) is None


def test_a_score_and_a_summary_over_that_score_alone_have_the_same_ci() -> None:
    """hospice_referral is the only benchmark of its category: the console read "0.286 [0.095, 0.476]" for the
    benchmark and "0.286 [0.095, 0.524]" for the category mean, two intervals for one number on one page, because the
    score's CI resampled with seed 0 and the summaries with the benchmark's own seed. Both resample alike now."""
    from medhelm_local.export import intervals

    rng = np.random.default_rng(7)
    for _ in range(40):
        values = rng.permutation(np.array([1.0] * 6 + [0.0] * 15))
        series = InstanceSeries(model="m", benchmark="hospice_referral", metric="exact_match", run_id="r",
                                aggregation=Aggregation.MEAN, ids=[f"i{k}" for k in range(21)], values=values)
        result = BenchmarkScore(model="m", benchmark="hospice_referral", metric="exact_match",
                                score=float(values.mean()), n=21)
        row = build_leaderboard([result], specs=SHIPPED, series=[series])[0]
        score_ci = row.ci["hospice_referral"]
        replicates = intervals.replicates(series)
        assert score_ci is not None and replicates is not None
        assert (score_ci.low, score_ci.high) == intervals.mean_interval([replicates]), values
