"""What an export may contain: per-run, per-benchmark aggregates, reduced under the disclosure policy.

The schema is closed (every model forbids extra fields). Raw aggregates are read from the store; the policy
then suppresses small cells (no score on fewer than ``min_cell_size`` instances, no count from 1 to
``min_cell_size - 1``), applies complementary suppression (a row never has exactly one suppressed count
that subtraction from the others would reveal; model averages, category scores and win rates use published
scores only) and rounds. A proportion's score (every instance scored 0 or 1) is withheld when the count it
implies is a small cell: k = score x n and n - k must each be 0 or at least ``min_cell_size`` (0.133 over 15
reveals 2 of 15). When the failed count is withheld, so is the score (score x n_total would reveal how many
were scored, and so the failures).

Every published score carries its 95% confidence interval (``ci_low``, ``ci_high``): the percentile bootstrap of
the CLI leaderboard (same resamples, same seed: the same interval for the same cell), rounded as the scores are and
published only beside its score, so a suppressed score's CI is suppressed with it (a CI around a withheld score
would locate it). Can a CI reveal more than its score and n? A proportion's bootstrap endpoints are multiples of
1/n, but j = ci_low x n is the count of positives in a resample at the 2.5th percentile, not a count of patients:
an endpoint of 1/40 beside a published 5/40 says "1 in a resample", which the implied-count rule (made for the
score) would misread. The interval is a function of the scored values and the fixed resample draws, whose only
count of patients, k = score x n, is published (and checked) with the score. Where the policy rounds counts
(``count_multiple`` > 1) the 1/n lattice would give the exact n away: a proportion's CI is then withheld
(``ci:count_rounding``; tests/export shows an n the score alone leaves open that the interval pins down).

Under count rounding the score itself is on that lattice too: k/n to 3 decimals singles out the exact n among
the counts that round alike in about two cases out of three (n from 20 to 200, multiples of 5). So a cell's
scores are then published with no more decimals than its instance count supports (``count_rounding_decimals``:
one unit of the last decimal at least 1/n for every n the published counts leave open, so that every such n has
a count giving the same rounded score); the cell says so (``score_decimals``, ``score:coarsened``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from medhelm_local import __version__
from medhelm_local.analysis.aggregate import benchmark_score, instance_series
from medhelm_local.analysis.comparability import compare_runs
from medhelm_local.analysis.leaderboard import win_pairings, win_rate
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES, bootstrap_ci
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.errors import BadInputError, NotFoundError
from medhelm_local.export import intervals
from medhelm_local.export.policy import ExportPolicy
from medhelm_local.home.config import ApplianceConfig
from medhelm_local.prompts.styles import run_prompt_style
from medhelm_local.scoring.metrics import Aggregation
from medhelm_local.store.store import RunInfo, Store

# v2: a model with no win rate has no rank (null; v1 numbered it after the ranked models). v3: each run's
# ``dataset_fingerprints`` are keyed (``Store.published_fingerprint``), no longer the plain ones. A recipient reading
# ``schema_id`` knows which it has.
EXPORT_SCHEMA = "medhelm-local/export-aggregates/v3"
CI_RESAMPLES = DEFAULT_RESAMPLES  # the CLI leaderboard's defaults: the export's CI is the leaderboard's CI
CI_SEED = 0
NOTES = (
    "Aggregates only: no instance-level data, prompts, outputs or judge explanations.",
    "Suppressed cells are shown as empty: fewer instances than the minimum cell size, or complementary.",
    "Model averages, category scores and win rates use published scores only; a win rate's interval compares "
    "each resample rounded as the published scores are (scores that round alike tie, as in the win rate).",
    "A model's score on a benchmark is from its latest requested run that scored an instance of it (a later run "
    "whose every request or judgement failed is listed among the per-run aggregates, not used).",
    "A score is over its scored instances only: a failed request or judgement is left out (counted as n failed), never "
    "scored 0, so two models' scores on a benchmark can be over different instances.",
    "Models are ranked by win rate, then macro average; a model without a win rate (no published score shared "
    "with another model) is listed after every model that has one.",
    "A score is suppressed when the count it implies (score times n, or n minus that) is a small cell.",
    "Each score carries its 95% confidence interval: percentile bootstrap over the scored instances (1000 "
    "resamples, seed 0, as the appliance's leaderboard), rounded as the scores; a suppressed score's interval is "
    "suppressed with it.",
    "Cost is estimated from the pricing configured on the appliance and measured usage, for what is behind the "
    "model's published scores (its latest cells' runs, a cell a later run replaced not counted) and the jury's "
    "judging of them; empty when any part is not priced.",
    "Where the policy rounds counts, a score and its interval are published with no more decimals than the "
    "cell's instance count supports, so that they cannot give away the exact count the rounding hides.",
)


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                          .encode("utf-8")).hexdigest()


def run_manifest_sha256(manifest: dict[str, Any]) -> str:
    """The runner's manifest hash when available, else sha256 of the canonical JSON."""
    try:
        from medhelm_local.runner.manifest import manifest_sha256
    except ImportError:
        return _sha256_json(manifest)
    return str(manifest_sha256(manifest))


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RawCell(_Closed):
    run_id: str
    model: str
    benchmark: str
    category: str
    metric: str
    score: float | None
    n_scored: int
    n_failed: int
    n_total: int
    created_at: datetime
    ci_low: float | None = None  # the score's 95% bootstrap CI (None: fewer than two scored instances)
    ci_high: float | None = None
    # the score on each resample of a seed of the benchmark's own (export.intervals): the summaries' CIs. In memory.
    replicates: list[float] | None = Field(default=None, exclude=True, repr=False)
    n_gold_empty: int | None = None  # EHRSQL: scored items whose gold query returns no rows
    score_nonempty_gold: float | None = None  # the score on the other scored items
    proportion: bool = True  # every scored instance is 0 or 1 and the score is their mean: score x n is a count
    # micro-F1: the summed true positives, false positives and false negatives the score is computed from (2 TP /
    # (2 TP + FP + FN)); with one label per instance it is k / n, whatever the instances' own values
    f1_counts: list[int] | None = None


class RawModelUsage(_Closed):
    model: str
    cost: float | None
    n_total: int


class RawRun(_Closed):
    run_id: str
    model: str
    status: str
    benchmarks: list[str]
    manifest_sha256: str
    dataset_fingerprints: dict[str, str]
    prompt_style: str = "default"  # the run's prompt style (default, or medhelm parity)
    published_fingerprints: dict[str, str] = {}  # as the bundle carries them (Store.published_fingerprint)


class RawExport(_Closed):
    runs: list[RawRun]
    cells: list[RawCell]
    usage: list[RawModelUsage]


def load_runs(store: Store, run_ids: list[str]) -> list[RunInfo]:
    runs = []
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is None:
            raise NotFoundError(f"--runs: run {run_id} is not in the store (see `leaderboard` or `audit report`)")
        if run.status != "finished":
            raise BadInputError(f"--runs: run {run_id} is {run.status}, not finished; only finished runs are exported")
        runs.append(run)
    return runs


def latest_cells(cells: Sequence[RawCell]) -> dict[tuple[str, str], int]:
    """(model, benchmark) -> the index of the cell the published averages, win rate and cost use, by the
    leaderboard's rule (``analysis.aggregate.shown_runs``): the latest run's that scored an instance, else the
    latest run's; runs created at the same instant are ordered by run id, as the leaderboard orders them, so the
    export never depends on the order of ``--runs``. A newer cell passed over is still published (its counts say
    why), marked as not in the leaderboard."""
    latest: dict[tuple[str, str], int] = {}
    for index, cell in enumerate(cells):
        key = (cell.model, cell.benchmark)
        if key not in latest or (cell.n_scored > 0, cell.created_at, cell.run_id) > (
                cells[latest[key]].n_scored > 0, cells[latest[key]].created_at, cells[latest[key]].run_id):
            latest[key] = index
    return latest


def _model_costs(config: ApplianceConfig, store: Store, cells: Sequence[RawCell]) -> dict[str, float | None]:
    """Per model, the measured cost of what is behind its published scores: the runs of its latest cells (a run
    some of whose cells a later run replaced counts for the others only) plus the jury's judging of them, priced
    as the leaderboard prices them (MedHELM's runs + LLM-jury total); None when any part is unknown."""
    from medhelm_local.analysis.cost_performance import model_costs

    behind = {key: cells[index].run_id for key, index in latest_cells(cells).items()}
    return {model: cost.total for model, cost in model_costs(store, config, behind).items()}


def _refuse_unlike(store: Store, cells: Sequence[RawCell]) -> None:
    """The published win rates compare each model's latest cell of a benchmark with its rivals': refuse runs
    that measured something else (another dataset version, spec or sample), as the leaderboard names them."""
    found = compare_runs(store, {key: cells[index].run_id for key, index in latest_cells(cells).items()}).unlike
    if found:
        (model, benchmark), rivals = min(found.items())
        said = "; ".join(f"{rival}'s: {', '.join(what)}" for rival, what in rivals.items())
        raise BadInputError(f"--runs: {model}'s run of {benchmark} is not comparable with {said}; their win rates "
                            "would compare unlike runs: export runs made on the same dataset version, spec and "
                            "instances (see `leaderboard`)")


def collect(store: Store, specs: SpecRegistry, config: ApplianceConfig, run_ids: list[str]) -> RawExport:
    runs = load_runs(store, run_ids)
    styles = sorted({run_prompt_style(run.manifest) for run in runs})
    if len(styles) > 1:
        raise BadInputError(f"--runs: the runs use different prompt styles ({', '.join(styles)}); their scores are "
                            "not comparable (win rates would mix them): export one style at a time")
    raw_runs: list[RawRun] = []
    cells: list[RawCell] = []
    n_totals: dict[str, int] = {}
    for run in runs:
        datasets = run.manifest.get("datasets") or {}
        fingerprints = {b: str(d.get("fingerprint")) for b, d in datasets.items() if isinstance(d, dict)}
        raw_runs.append(RawRun(run_id=run.run_id, model=run.model, status=run.status, benchmarks=run.benchmarks,
                               manifest_sha256=run_manifest_sha256(run.manifest), dataset_fingerprints=fingerprints,
                               prompt_style=run_prompt_style(run.manifest),
                               published_fingerprints={b: store.published_fingerprint(fp)
                                                       for b, fp in fingerprints.items()}))
        n_run = 0
        for benchmark in run.benchmarks:
            result = benchmark_score(store, specs, run.run_id, run.model, benchmark)
            series = instance_series(store, specs, run.run_id, run.model, benchmark)
            proportion = set(series.values.tolist()) <= {0.0, 1.0} and series.aggregation == Aggregation.MEAN
            ci = bootstrap_ci(series.values, series.counts, series.aggregation, resamples=CI_RESAMPLES,
                              seed=CI_SEED)
            n_total = store.count_items(run.run_id, benchmark)
            n_run += n_total
            f1_counts = ([round(float(v)) for v in series.counts.sum(axis=0)]
                         if series.aggregation == Aggregation.MICRO_F1 and series.counts is not None else None)
            cells.append(RawCell(
                run_id=run.run_id, model=run.model, benchmark=benchmark, category=specs.get(benchmark).category,
                metric=result.metric, score=result.score, n_scored=result.n, n_failed=result.n_failed,
                n_total=n_total, created_at=run.created_at, n_gold_empty=result.n_gold_empty,
                score_nonempty_gold=result.score_nonempty_gold, proportion=proportion, f1_counts=f1_counts,
                ci_low=None if ci is None else ci[0], ci_high=None if ci is None else ci[1],
                replicates=intervals.replicates(series),
            ))
        n_totals[run.model] = n_totals.get(run.model, 0) + n_run
    _refuse_unlike(store, cells)
    costs = _model_costs(config, store, cells)
    usage = [RawModelUsage(model=model, cost=costs.get(model), n_total=n) for model, n in n_totals.items()]
    return RawExport(runs=raw_runs, cells=cells, usage=usage)


# -- the published form ---------------------------------------------------------------------------------------


class PublishedRun(_Closed):
    run_id: str
    model: str
    status: str
    benchmarks: list[str]
    manifest_sha256: str
    dataset_fingerprints: dict[str, str]  # keyed by the appliance's secret (Store.published_fingerprint)
    prompt_style: str = "default"  # the run's prompt style (default, or medhelm parity)


class PublishedCell(_Closed):
    run_id: str
    model: str
    benchmark: str
    category: str
    metric: str
    score: float | None
    ci_low: float | None
    ci_high: float | None
    n_scored: int | None
    n_failed: int | None
    n_total: int | None
    suppressed: list[str]
    n_gold_empty: int | None = None
    score_nonempty_gold: float | None = None
    score_decimals: int | None = None  # fewer decimals than the policy's for this cell's scores (count rounding)
    in_leaderboard: bool = True  # the cell its averages and win rate use (latest_cells: the latest that scored)


class PublishedModel(_Closed):
    model: str
    rank: int | None  # 1 for the best win rate; None: no win rate, unranked (as the console's leaderboard)
    win_rate: float | None
    win_rate_ci_low: float | None = None  # 95% CIs of the summaries (export.intervals), rounded as the scores
    win_rate_ci_high: float | None = None
    win_pairs: int  # the (benchmark, rival) pairs the win rate is over
    macro_avg: float | None
    macro_avg_ci_low: float | None = None
    macro_avg_ci_high: float | None = None
    category_scores: dict[str, float | None]
    category_ci_low: dict[str, float | None] = {}
    category_ci_high: dict[str, float | None] = {}
    category_n: dict[str, int] = {}  # the published benchmarks each category mean is over
    suppressed: list[str] = []  # summary intervals withheld, and why
    benchmarks_published: int
    benchmarks_suppressed: int
    cost: float | None


class ExportAggregates(_Closed):
    schema_id: str
    request_id: str
    generated_at: str
    appliance_version: str
    policy_sha256: str
    min_cell_size: int
    score_decimals: int = 3  # the policy's rounding: every score, CI and average is printed with as many decimals
    cost_decimals: int = 2
    runs: list[PublishedRun]
    cells: list[PublishedCell]
    models: list[PublishedModel]
    notes: list[str]


def _count(value: int, policy: ExportPolicy) -> int | None:
    if 0 < value < policy.min_cell_size:
        return None
    multiple = policy.rounding.count_multiple
    return value if multiple == 1 else int(round(value / multiple) * multiple)


def round_cost(value: float, decimals: int) -> float:
    """A cost rounded to the policy's ``decimals``; a non-zero cost that would round to 0 (a small local run's
    0.00004) keeps ``decimals`` significant digits instead (0.00004 at 2 decimals, not 0.0): a measured cost
    never reads as zero, and no more precise than a cost of 0.10-0.99 at those decimals already is."""
    rounded = round(value, decimals)
    if rounded != 0 or value == 0 or not math.isfinite(value):
        return rounded
    return round(value, max(decimals, 1) - 1 - math.floor(math.log10(abs(value))))


def count_rounding_decimals(n: int, policy: ExportPolicy) -> int:
    """The decimals a mean over ``n`` instances may be published with where counts are rounded to multiples of
    m: every n' the published counts leave open (within m of n: a count, or a difference of two, each off by at
    most m/2) then has some k' with k'/n' rounding to the same value, as long as one unit of the last decimal is
    at least 1/n'. Means of values on a coarser lattice than 0/1 (a judge's 1-5) are covered alike."""
    decimals = policy.rounding.score_decimals
    multiple = policy.rounding.count_multiple
    if multiple == 1:
        return decimals
    lowest = max(1, n - multiple)
    return min(decimals, len(str(lowest)) - 1)  # 10**d <= lowest


def cell_decimals(cell: RawCell, policy: ExportPolicy) -> int:
    """The decimals every score of ``cell`` (its score, CI and score on non-empty gold) is published with."""
    decimals = count_rounding_decimals(cell.n_scored, policy)
    if cell.n_gold_empty is not None and cell.score_nonempty_gold is not None:
        decimals = min(decimals, count_rounding_decimals(cell.n_scored - cell.n_gold_empty, policy))
    return decimals


def implied_small(score: float, n: int, policy: ExportPolicy) -> bool:
    """Whether a proportion over ``n`` instances implies a count (k = score x n, or n - k) from 1 to
    ``min_cell_size - 1``."""
    if not 0.0 <= score <= 1.0 or n <= 0:
        return False
    implied = score * n
    if abs(implied - round(implied)) < 1e-6:
        implied = float(round(implied))
    return any(1e-9 < k < policy.min_cell_size - 1e-9 for k in (implied, n - implied))


def f1_small(cell: RawCell, policy: ExportPolicy) -> bool:
    """Whether a micro-F1 score is computed from a summed TP, FP or FN from 1 to ``min_cell_size - 1``: with one
    label per instance, micro-F1 is k / n (k right, FP = FN = n - k) although the cell is no proportion."""
    return cell.f1_counts is not None and any(0 < c < policy.min_cell_size for c in cell.f1_counts)


def publish_cell(cell: RawCell, policy: ExportPolicy) -> PublishedCell:
    suppressed: list[str] = []
    if 0 < cell.n_total < policy.min_cell_size:
        return PublishedCell(run_id=cell.run_id, model=cell.model, benchmark=cell.benchmark, category=cell.category,
                             metric=cell.metric, score=None, ci_low=None, ci_high=None, n_scored=None,
                             n_failed=None, n_total=None, suppressed=["cell:small_cell"])
    score: float | None = None
    decimals = cell_decimals(cell, policy)
    if cell.score is not None:
        if cell.n_scored < policy.min_cell_size:
            suppressed.append("score:small_cell")
        elif cell.proportion and implied_small(cell.score, cell.n_scored, policy):
            suppressed.append("score:implied_count")
        elif f1_small(cell, policy):
            suppressed.append("score:implied_count")  # micro-F1 of one label per instance is k / n
        elif 0 < cell.n_failed < policy.min_cell_size:
            suppressed.append("score:complementary")  # score x n_total would reveal n_scored, so n_failed
        else:
            score = round(cell.score, decimals)
    n_scored, n_failed, n_total = (_count(cell.n_scored, policy), _count(cell.n_failed, policy),
                                   _count(cell.n_total, policy))
    if n_scored is None:
        suppressed.append("n_scored:small_cell")
    if n_failed is None:
        suppressed.append("n_failed:small_cell")
    if policy.complementary_suppression and n_total is not None and (n_scored is None) != (n_failed is None):
        if n_scored is None:
            n_failed = None
            suppressed.append("n_failed:complementary")
        else:
            n_scored = None
            suppressed.append("n_scored:complementary")
    n_gold_empty, score_nonempty_gold = _publish_gold_empty(cell, n_scored, score, policy, suppressed, decimals)
    ci_low, ci_high = publish_ci(cell, score, policy, suppressed, decimals)
    coarsened = decimals < policy.rounding.score_decimals and (score is not None or score_nonempty_gold is not None)
    if coarsened:
        suppressed.append("score:coarsened")
    return PublishedCell(run_id=cell.run_id, model=cell.model, benchmark=cell.benchmark, category=cell.category,
                         metric=cell.metric, score=score, ci_low=ci_low, ci_high=ci_high, n_scored=n_scored,
                         n_failed=n_failed, n_total=n_total, suppressed=suppressed, n_gold_empty=n_gold_empty,
                         score_nonempty_gold=score_nonempty_gold, score_decimals=decimals if coarsened else None)


def publish_ci(cell: RawCell, score: float | None, policy: ExportPolicy, suppressed: list[str],
               decimals: int) -> tuple[float | None, float | None]:
    """The score's CI under the score's own rules: only beside a published score, rounded as the score is (to the
    cell's ``decimals``); a proportion's CI is withheld where counts are rounded (its endpoints, multiples of 1/n,
    would give n away)."""
    if cell.ci_low is None or cell.ci_high is None:
        return None, None
    if score is None:
        suppressed.append("ci:score_suppressed")
        return None, None
    if cell.proportion and policy.rounding.count_multiple > 1:
        suppressed.append("ci:count_rounding")
        return None, None
    return round(cell.ci_low, decimals), round(cell.ci_high, decimals)


def _publish_gold_empty(cell: RawCell, n_scored: int | None, score: float | None, policy: ExportPolicy,
                        suppressed: list[str], decimals: int) -> tuple[int | None, float | None]:
    """The empty-gold count and the score on non-empty gold, under the same small-cell rule as the rest: the
    count is withheld when it, or the non-empty count it reveals beside ``n_scored``, is a small cell."""
    if cell.n_gold_empty is None:
        return None, None
    n_nonempty = cell.n_scored - cell.n_gold_empty
    n_gold_empty = _count(cell.n_gold_empty, policy)
    if n_gold_empty is None:
        suppressed.append("n_gold_empty:small_cell")
    elif n_scored is not None and 0 < n_nonempty < policy.min_cell_size:
        n_gold_empty = None
        suppressed.append("n_gold_empty:complementary")
    score_nonempty_gold: float | None = None
    if cell.score_nonempty_gold is not None:
        if n_nonempty < policy.min_cell_size:
            suppressed.append("score_nonempty_gold:small_cell")
        elif cell.proportion and implied_small(cell.score_nonempty_gold, n_nonempty, policy):
            suppressed.append("score_nonempty_gold:implied_count")
        elif score is None:
            suppressed.append("score_nonempty_gold:complementary")  # with the empty-gold part, it reveals the score
        elif n_gold_empty is None:
            # beside the score and n, its decimals pin the withheld empty-gold count (0.541 fits 20 of 37 only)
            suppressed.append("score_nonempty_gold:complementary")
        else:
            score_nonempty_gold = round(cell.score_nonempty_gold, decimals)
    return n_gold_empty, score_nonempty_gold


def summary_decimals(cells: list[RawCell], policy: ExportPolicy) -> int:
    """The decimals of an interval over the means of ``cells``: the fewest any of them is published with."""
    return min([policy.rounding.score_decimals, *(cell_decimals(c, policy) for c in cells)])


def _summary_intervals(used: dict[str, list[RawCell]], policy: ExportPolicy) -> dict[str, dict[str, Any]]:
    """Per model, the 95% CIs of its win rate, macro average and category means (``PublishedModel`` fields), over
    its published scores only, rounded as the scores. Withheld where a score behind it has no resamples (fewer than
    two instances), or where counts are rounded and a proportion takes part (its resamples, multiples of 1/n,
    would give the exact n away, as its own CI would). The mean of one benchmark's resamples is on that benchmark's
    lattice (a judge's 1-5 over n): a macro average's or category mean's interval takes the fewest decimals of
    the cells behind it (``summary_decimals``), as those cells' own intervals do."""

    def rounded(interval: tuple[float, float] | None, cells: list[RawCell] | None = None
                ) -> tuple[float | None, float | None]:
        decimals = summary_decimals(cells or [], policy)
        return (None, None) if interval is None else (round(interval[0], decimals), round(interval[1], decimals))

    def blocked(cells: list[RawCell]) -> str | None:
        if policy.rounding.count_multiple > 1 and any(c.proportion for c in cells):
            return "count_rounding"
        if any(c.replicates is None for c in cells):
            return "too_few_instances"
        return None

    # The win rate compares the published scores, rounded (two that round alike tie: a win for both under
    # MedHELM's rule); its interval compares each resample rounded the same way, or the two would disagree.
    draws = {m: {c.benchmark: [round(v, cell_decimals(c, policy)) for v in c.replicates]
                 for c in cells if c.replicates is not None} for m, cells in used.items()}
    everyone = [c for cells in used.values() for c in cells]
    wins = intervals.win_rate_intervals(draws) if len(used) > 1 and blocked(everyone) is None else {}
    out: dict[str, dict[str, Any]] = {}
    for model, cells in used.items():
        fields: dict[str, Any] = {"suppressed": []}
        reason = blocked(everyone) if len(used) > 1 else None
        if reason:
            fields["suppressed"].append(f"win_rate_ci:{reason}")
        fields["win_rate_ci_low"], fields["win_rate_ci_high"] = rounded(wins.get(model))
        reason = blocked(cells)
        if reason:
            fields["suppressed"].append(f"macro_avg_ci:{reason}")
        else:
            fields["macro_avg_ci_low"], fields["macro_avg_ci_high"] = rounded(
                intervals.mean_interval([c.replicates for c in cells if c.replicates is not None]), cells)
        by_category: dict[str, list[RawCell]] = {}
        for cell in cells:
            by_category.setdefault(cell.category, []).append(cell)
        fields["category_n"] = {c: len(v) for c, v in sorted(by_category.items())}
        fields["category_ci_low"], fields["category_ci_high"] = {}, {}
        for category, members in sorted(by_category.items()):
            reason = blocked(members)
            low, high = (None, None) if reason else rounded(
                intervals.mean_interval([c.replicates for c in members if c.replicates is not None]), members)
            if reason:
                fields["suppressed"].append(f"category_ci:{reason}")
            fields["category_ci_low"][category], fields["category_ci_high"][category] = low, high
        fields["suppressed"] = sorted(set(fields["suppressed"]))
        out[model] = fields
    return out


def publish(raw: RawExport, policy: ExportPolicy, *, request_id: str, policy_sha256: str,
            generated_at: str | None = None) -> ExportAggregates:
    cells = [publish_cell(c, policy) for c in raw.cells]
    decimals = policy.rounding.score_decimals
    # The leaderboard per model uses each benchmark's latest requested run that scored it (latest_cells).
    latest = {key: (cells[index], raw.cells[index]) for key, index in latest_cells(raw.cells).items()}
    published: dict[str, dict[str, float]] = {}
    categories: dict[str, dict[str, list[float]]] = {}
    counts: dict[str, list[int]] = {}
    used: dict[str, list[RawCell]] = {}  # the raw cells behind each model's published scores
    for (model, benchmark), (cell, rawcell) in latest.items():
        published.setdefault(model, {})
        categories.setdefault(model, {})
        counts.setdefault(model, [0, 0])
        used.setdefault(model, [])
        if cell.score is None:
            counts[model][1] += 1
            continue
        counts[model][0] += 1
        published[model][benchmark] = cell.score
        categories[model].setdefault(cell.category, []).append(cell.score)
        used[model].append(rawcell)
    for cell in cells:
        cell.in_leaderboard = latest[(cell.model, cell.benchmark)][0] is cell
    summary_ci = _summary_intervals(used, policy)
    # The leaderboard's own win rule (MedHELM's, its tie tolerance), over the published scores: a score rounded
    # alike ties. No pairing is left out as not comparable: collect() refuses runs that are not.
    rates = {m: win_rate(published, m) for m in published}
    pairs = {m: win_pairings(published, m)[0] for m in published}
    usage = {u.model: u for u in raw.usage}
    models = []
    for model in published:
        values = list(published[model].values())
        raw_cost = usage[model].cost if model in usage and usage[model].n_total >= policy.min_cell_size else None
        rate = rates.get(model)
        models.append(PublishedModel(
            model=model, rank=None, win_rate=None if rate is None else round(rate, decimals),
            win_pairs=pairs[model],
            macro_avg=round(sum(values) / len(values), decimals) if values else None,
            category_scores={c: round(sum(v) / len(v), decimals) for c, v in sorted(categories[model].items())},
            benchmarks_published=counts[model][0], benchmarks_suppressed=counts[model][1],
            cost=None if raw_cost is None else round_cost(raw_cost, policy.rounding.cost_decimals),
            **summary_ci.get(model, {}),
        ))
    # A model with no win rate (no published rival, nothing published) is not one that lost every pairing: it is
    # listed after every model that has one, whatever its macro average, with no rank (the leaderboard's unranked);
    # numbered, an all-suppressed export read "1 A, 2 B" from the alphabet.
    models.sort(key=lambda m: (m.win_rate is None, -(m.win_rate or 0), -(m.macro_avg or 0), m.model))
    for rank, model_row in enumerate((m for m in models if m.win_rate is not None), start=1):
        model_row.rank = rank
    return ExportAggregates(
        schema_id=EXPORT_SCHEMA, request_id=request_id,
        generated_at=generated_at or datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        appliance_version=__version__, policy_sha256=policy_sha256, min_cell_size=policy.min_cell_size,
        score_decimals=policy.rounding.score_decimals, cost_decimals=policy.rounding.cost_decimals,
        runs=[PublishedRun(**r.model_dump(exclude={"published_fingerprints"})
                           | {"dataset_fingerprints": r.published_fingerprints}) for r in raw.runs],
        cells=cells, models=models, notes=list(NOTES),
    )
