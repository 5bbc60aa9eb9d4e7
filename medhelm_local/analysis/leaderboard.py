"""The leaderboard: per-benchmark scores with CIs, pairwise win-rate, macro-average, per-category means, paired
differences, minimum detectable effects and cost-performance.

Win-rate (MedHELM 4.3.2): on each benchmark, each model is compared with every rival that has a score there; the
**default rule is the paper's**: a win when the model's score is >= the rival's (so a tie is a win for both).
HELM's rule (``WinRule.HELM``) counts a tie as half a win and, as HELM's mean win rate, averages the model's
per-benchmark win fractions. The paper's win-rate is the mean over all (benchmark, rival) pairings (the two agree
when every benchmark has the same rivals); the win SD is the SD over benchmarks of the model's per-benchmark win
fraction. A (benchmark, rival) pairing whose two runs are not comparable (another dataset version, spec or
instances: ``analysis.comparability``) counts in neither model's win rate or win SD, nor in the paired differences
and MDEs: it is no win and no loss; a model all of whose pairings are left out has no win rate (None). Models are
ranked by win rate, then macro-average; a model with no win rate (no comparable rival, or no score) is unranked,
listed after the ranked ones with the reason, never ranked as if it had lost every pairing. Macro-average
and its SD are over the model's benchmarks with equal weight, comparable or not (they compare nothing). SDs are
population SDs (ddof 0), and undefined (None, never 0.0) over fewer than two values: one benchmark says nothing
about how a model's scores spread. Two scores within :data:`TIE_TOLERANCE` of each other tie: equal means summed in
another order (jury ratings, thirds and ninths) differ by a rounding error of about 1e-16, which must not decide a
win. A model's score on a benchmark is over its scored items: a failed request or judgement is left out, never
scored 0, so two models' scores there can be over different items. The win rate and macro average compare those
scores as they are (the paper's benchmark scores); the paired differences and MDEs use the items both scored; the
leaderboard names each benchmark where comparable runs' scored items differ (:func:`item_set_differences`) and
reports beside the win rate the one with each pairing decided over the items both models scored
(:func:`common_items_win_rate`), which ranks nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, Field

from medhelm_local.analysis.aggregate import InstanceSeries, NewerRun, statistic
from medhelm_local.analysis.cost_performance import ModelCost, pareto_front
from medhelm_local.analysis.stats import (
    DEFAULT_RESAMPLES,
    benchmark_seed,
    bootstrap_ci,
    bootstrap_matrix,
    mde,
    paired_bootstrap_diff,
    percentile_interval,
    spread,
)
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.errors import NotFoundError
from medhelm_local.records import BenchmarkScore

# What a table shows for an SD over fewer than two values, and why (the CLI and the console say it the same way).
SD_UNDEFINED = "n/a"
SD_UNDEFINED_NOTE = ("SD n/a: undefined, an SD needs two values: the SD over a model's benchmarks with one scored "
                     "benchmark, the win SD with one benchmark that has a comparable rival, an MDE's SD with one "
                     "model pair")
# What a table shows for the win rate of a model whose every pairing with a rival compares unlike runs (the reason is
# the comparability lines': ``analysis.comparability``).
WIN_RATE_LEFT_OUT = "n/a"
# What a table shows for the rank of a model with no win rate (``ModelRow.unranked_reason`` says why).
UNRANKED = "unranked"

TIE_TOLERANCE = 1e-12  # far below any real difference of two scores (k/n, n up to 10^5), far above float noise

# (model, benchmark) -> rival -> what differs between their runs (``analysis.comparability``): pairings to leave out
Unlike = Mapping[tuple[str, str], Mapping[str, list[str]]]
NO_UNLIKE: Unlike = {}


def comparable(unlike: Unlike, benchmark: str, model: str, rival: str) -> bool:
    """Whether the two models' runs of ``benchmark`` measured the same thing (a difference named either way: not)."""
    return rival not in unlike.get((model, benchmark), {}) and model not in unlike.get((rival, benchmark), {})


def is_tie(own: float, rival: float) -> bool:
    """Whether two scores are equal up to the rounding error of computing them (:data:`TIE_TOLERANCE`)."""
    return abs(own - rival) <= TIE_TOLERANCE


class WinRule(StrEnum):
    PAPER = "paper"  # MedHELM: a win when score >= rival's (ties are wins for both) - the default
    HELM = "helm"  # HELM: a win when score > rival's, half a win for a tie


class Interval(BaseModel):
    low: float
    high: float


class PairwiseDifference(BaseModel):
    """Score of ``model`` minus score of ``rival`` on their common scored instances, with a paired bootstrap CI."""

    model: str
    rival: str
    benchmark: str
    difference: float
    ci_low: float | None
    ci_high: float | None
    n: int  # common instances

    @property
    def significant(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None and (self.ci_low > 0 or self.ci_high < 0)


class BenchmarkMDE(BaseModel):
    """Appendix E: mean pairwise MDE and its SD over the model pairs (alpha 0.05, power 0.8; no SD of one pair)."""

    benchmark: str
    mde: float
    sd: float | None
    pairs: int


class ItemSetDifference(BaseModel):
    """How a model's scored items on a benchmark differ from a rival's whose run is comparable: each score leaves
    out its own failed items (never scored 0), so the two scores are over different items."""

    only_own: int  # items the model's score counts and the rival's leaves out
    only_rival: int  # items the rival's score counts and the model's leaves out


class ModelRow(BaseModel):
    model: str
    win_rate: float | None
    macro_avg: float | None
    benchmarks: dict[str, BenchmarkScore]
    win_sd: float | None = None  # None with fewer than two benchmarks that have a comparable rival: undefined
    win_pairs: int = 0  # the (benchmark, rival) pairings its win rate counts
    win_pairs_left_out: int = 0  # pairings with a rival's score left out of it: their runs are not comparable
    sd: float | None = None  # SD of the benchmark scores around the macro-average; None with fewer than two
    categories: dict[str, float] = Field(default_factory=dict)  # category -> mean score of its benchmarks
    ci: dict[str, Interval | None] = Field(default_factory=dict)  # benchmark -> bootstrap 95% CI
    # benchmark -> parse/strict rates, and the share of prompts truncated to fit the model (truncated_share)
    format_rates: dict[str, dict[str, float]] = Field(default_factory=dict)
    judge_failures: dict[str, dict[str, float]] = Field(default_factory=dict)  # benchmark -> judge -> rate
    cost: float | None = None  # total evaluation cost (runs + jury), when it can be computed from pricing
    cost_detail: dict[str, float | str | None] = Field(default_factory=dict)  # benchmark / jury cost, note
    pareto: bool | None = None  # on the cost / win-rate Pareto front (None: cost or win-rate unknown)
    win_rule: WinRule = WinRule.PAPER
    prompt_style: str = "default"  # every cell of a leaderboard comes from runs of this one prompt style
    prompt_sha256: dict[str, str] = Field(default_factory=dict)  # benchmark -> the run's prompt-style hash
    # benchmark -> rival -> what differs between their runs (dataset version, spec, instances): not comparable
    not_comparable: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    # benchmark -> whether its run scored the dataset version registered last (the one new runs use)
    dataset_current: dict[str, bool] = Field(default_factory=dict)
    rank: int | None = None  # 1 for the best win rate; None: unranked, no win rate (``unranked_reason``)
    run_ids: dict[str, str] = Field(default_factory=dict)  # benchmark -> the run its score is from
    # benchmark -> the newer runs not shown (failed, interrupted, unfinished, or scoring nothing), newest first
    newer_runs: dict[str, list[NewerRun]] = Field(default_factory=dict)
    # benchmark -> rival -> how their scored items differ (failures left out), where the two runs are comparable
    items_differ: dict[str, dict[str, ItemSetDifference]] = Field(default_factory=dict)
    # the win rate with each pairing decided over the items both scored (``common_items_win_rate``); not the rank's
    win_rate_common_items: float | None = None

    @property
    def win_rate_left_out(self) -> bool:
        """It has rivals, but every pairing with one compares runs that are not comparable: no win rate, never 0."""
        return self.win_rate is None and self.win_pairs_left_out > 0

    @property
    def unranked_reason(self) -> str | None:
        """Why the model has no win rate and so no rank (None: it has one)."""
        if self.win_rate is not None:
            return None
        if all(s.score is None for s in self.benchmarks.values()):
            return "no scored benchmark: every request or judgement failed"
        if self.win_rate_left_out:
            which = ("its only (benchmark, rival) pairing is" if self.win_pairs_left_out == 1
                     else f"all {self.win_pairs_left_out} of its (benchmark, rival) pairings are")
            return f"{which} left out, their runs not comparable"
        return "no other model has a score on any of its benchmarks"

    @property
    def unscored(self) -> list[str]:
        """Benchmarks the model ran without a single scored instance (every request or judgement failed): left
        out of its win rate and macro average, never scored as 0, so the row must say so."""
        return sorted(b for b, s in self.benchmarks.items() if s.score is None)


def _newer_run_text(run: NewerRun) -> str:
    if run.status == "finished":
        return f"{run.run_id} (finished, no instance scored: every request or judgement failed)"
    if run.status == "inferred":
        return f"{run.run_id} (answered, not scored yet)"
    if run.status == "running" and run.live is False:  # killed: what `runs list` shows as interrupted
        return f"{run.run_id} (interrupted: no process is sending it, not finished)"
    return f"{run.run_id} ({run.status}, not finished)"


def newer_run_lines(rows: list[ModelRow]) -> list[str]:
    """One sentence per model and benchmark whose score comes from an older run than its newest: which run the
    score is from, and the newer ones not shown and why (the table's, the console's)."""
    lines = []
    for row in rows:
        for benchmark, runs in row.newer_runs.items():
            shown = f"run {row.run_ids[benchmark]}" if benchmark in row.run_ids else "an older run"
            lines.append(f"{row.model} on {benchmark} shows {shown}, not the newer "
                         f"{'; '.join(_newer_run_text(run) for run in runs)}")
    return lines


def _win_value(own: float, rival: float, rule: WinRule) -> float:
    if is_tie(own, rival):
        return 0.5 if rule == WinRule.HELM else 1.0
    return 1.0 if own > rival else 0.0


def _rival_scores(scores: dict[str, dict[str, float]], model: str, unlike: Unlike) -> dict[str, list[float]]:
    """Per benchmark the model has a score on: the scores there of the rivals whose runs are comparable with its."""
    return {benchmark: [s[benchmark] for r, s in scores.items()
                        if r != model and benchmark in s and comparable(unlike, benchmark, model, r)]
            for benchmark in scores[model]}


def _win_fractions(scores: dict[str, dict[str, float]], model: str, rule: WinRule,
                   unlike: Unlike) -> list[tuple[float, int]]:
    """Per benchmark where the model has a comparable rival's score: (its wins there, how many rivals)."""
    out = []
    for benchmark, rivals in _rival_scores(scores, model, unlike).items():
        if rivals:
            out.append((sum(_win_value(scores[model][benchmark], r, rule) for r in rivals), len(rivals)))
    return out


def win_pairings(scores: dict[str, dict[str, float]], model: str, unlike: Unlike = NO_UNLIKE) -> tuple[int, int]:
    """(the (benchmark, rival) pairings of two scores the model's win rate counts, those left out as not
    comparable)."""
    counted = sum(len(rivals) for rivals in _rival_scores(scores, model, unlike).values())
    every = sum(len(rivals) for rivals in _rival_scores(scores, model, NO_UNLIKE).values())
    return counted, every - counted


def win_rate(scores: dict[str, dict[str, float]], model: str, rule: WinRule = WinRule.PAPER, *,
             unlike: Unlike = NO_UNLIKE) -> float | None:
    """The paper's rule: the mean win over all (benchmark, rival) pairs where both have a score. HELM's: the mean
    over benchmarks of the model's win fraction there (HELM's mean win rate), which weighs a benchmark with few
    rivals as much as one with many. Pairs in ``unlike`` are left out. None without any pair."""
    return _mean_win(_win_fractions(scores, model, rule, unlike), rule)


def _mean_win(fractions: list[tuple[float, int]], rule: WinRule) -> float | None:
    """The win rate from (wins, rivals) per benchmark: over all pairings (paper), or the mean of the per-benchmark
    fractions (HELM); None without any pairing."""
    if not fractions:
        return None
    if rule == WinRule.HELM:
        return float(np.mean([wins / rivals for wins, rivals in fractions]))
    return sum(wins for wins, _ in fractions) / sum(rivals for _, rivals in fractions)


def win_sd(scores: dict[str, dict[str, float]], model: str, rule: WinRule = WinRule.PAPER, *,
           unlike: Unlike = NO_UNLIKE) -> float | None:
    """SD over benchmarks of the model's per-benchmark win fraction (how consistently it wins; pairs in ``unlike``
    left out); None over fewer than two benchmarks."""
    return spread([wins / rivals for wins, rivals in _win_fractions(scores, model, rule, unlike)])


def known_categories(specs: SpecRegistry) -> list[str]:
    return sorted({spec.category for spec in specs.all()})


def resolve_category(name: str, specs: SpecRegistry) -> str:
    """A category name as given on the command line (case and '&'/'and' insensitive) -> the spec category."""
    def fold(text: str) -> str:
        return " ".join(text.lower().replace("&", "and").split())

    for category in known_categories(specs):
        if fold(category) == fold(name):
            return category
    raise NotFoundError(f"unknown category {name!r}; expected one of: {', '.join(known_categories(specs))}")


def build_leaderboard(results: list[BenchmarkScore], *, specs: SpecRegistry,
                      series: list[InstanceSeries] | None = None,
                      rule: WinRule = WinRule.PAPER, category: str | None = None,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                      costs: dict[str, float | None] | None = None, unlike: Unlike = NO_UNLIKE) -> list[ModelRow]:
    """Rows ranked by win-rate, then macro-average (:func:`ranked`). ``series`` (per-instance values) adds bootstrap
    CIs; ``category`` keeps only that category's benchmarks (categories from ``specs``); ``costs`` maps model -> cost
    (None: unavailable); ``unlike`` names the pairings of runs that are not comparable, left out of win rates."""
    if category is not None:
        results = [r for r in results if specs.category_of(r.benchmark) == category]
    per_model: dict[str, dict[str, BenchmarkScore]] = defaultdict(dict)
    numeric: dict[str, dict[str, float]] = defaultdict(dict)
    for result in results:
        per_model[result.model][result.benchmark] = result
        if result.score is not None:
            numeric[result.model][result.benchmark] = result.score
    by_key = {(s.model, s.benchmark): s for s in series or []}
    kept = [s for s in series or [] if s.benchmark in {r.benchmark for r in results}]
    intervals = score_intervals(kept, resamples=resamples, seed=seed)
    rows = []
    for model, benchmarks in per_model.items():
        values = list(numeric[model].values())
        by_category: dict[str, list[float]] = defaultdict(list)
        for benchmark, value in numeric[model].items():
            by_category[specs.category_of(benchmark)].append(value)
        ci: dict[str, Interval | None] = {}
        format_rates: dict[str, dict[str, float]] = {}
        judge_failures: dict[str, dict[str, float]] = {}
        for benchmark in benchmarks:
            found = by_key.get((model, benchmark))
            if found is not None and found.extra:
                format_rates[benchmark] = dict(found.extra)
            if found is not None and found.judge_failure_rates:
                judge_failures[benchmark] = dict(found.judge_failure_rates)
            if found is not None:
                ci[benchmark] = intervals.get((model, benchmark))
        compared = len(per_model) > 1
        pairs, left_out = win_pairings(numeric, model, unlike)
        rows.append(ModelRow(
            model=model,
            win_rate=win_rate(numeric, model, rule, unlike=unlike) if compared else None,
            win_sd=win_sd(numeric, model, rule, unlike=unlike) if compared else None,
            win_pairs=pairs, win_pairs_left_out=left_out,
            macro_avg=float(np.mean(values)) if values else None,
            sd=spread(values),
            categories={c: float(np.mean(v)) for c, v in sorted(by_category.items())},
            benchmarks=benchmarks, ci=ci, format_rates=format_rates, judge_failures=judge_failures,
            cost=(costs or {}).get(model), win_rule=rule,
        ))
    return ranked(rows)


def ranked(rows: list[ModelRow]) -> list[ModelRow]:
    """The rows with a win rate by win rate, then macro-average, numbered from 1; after them, by name, those without
    one (unranked: no comparable rival or no score), with no rank."""
    scored = sorted((r for r in rows if r.win_rate is not None),
                    key=lambda r: (-(r.win_rate or 0), -(r.macro_avg or 0), r.model))
    for rank, row in enumerate(scored, start=1):
        row.rank = rank
    unranked = sorted((r for r in rows if r.win_rate is None), key=lambda r: r.model)
    for row in unranked:
        row.rank = None
    return [*scored, *unranked]


def cost_unknown_why(row: ModelRow) -> str:
    """Why a row's cost is unknown, as cost_performance noted it (no pricing, a model or judge removed since)."""
    return str(row.cost_detail.get("note") or "no pricing configured for this model")


def apply_costs(rows: list[ModelRow], costs: dict[str, ModelCost]) -> None:
    """Attach each model's cost and mark the cost / win-rate Pareto front."""
    for row in rows:
        found = costs.get(row.model)
        if found is not None:
            row.cost = found.total
            row.cost_detail = {"benchmark_cost": found.benchmark_cost, "jury_cost": found.jury_cost,
                               "note": found.note}
    front = pareto_front({r.model: (r.cost, r.win_rate) for r in rows})
    for row in rows:
        row.pareto = (row.model in front) if row.cost is not None and row.win_rate is not None else None


def _shared_ids(members: list[InstanceSeries]) -> bool:
    """All members scored exactly the same instances (the usual case): one resample table serves them all."""
    return len(members) > 1 and all(m.ids == members[0].ids for m in members[1:]) and len(members[0].ids) > 1


def _stack_counts(members: list[InstanceSeries]) -> np.ndarray | None:
    if any(m.counts is None for m in members):
        return None
    return np.stack([m.counts for m in members if m.counts is not None])


def score_intervals(series: list[InstanceSeries], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
                    ) -> dict[tuple[str, str], Interval | None]:
    """Bootstrap 95% CI of every (model, benchmark) score (None: fewer than two instances or no resamples), each
    benchmark on its own seed (``benchmark_seed``: the resamples its summaries' CIs use)."""
    out: dict[tuple[str, str], Interval | None] = {}
    for benchmark, members in _by_benchmark(series).items():
        own = benchmark_seed(benchmark, seed)
        if resamples >= 1 and _shared_ids(members):
            stats = bootstrap_matrix(np.stack([m.values for m in members]), _stack_counts(members),
                                     members[0].aggregation, resamples=resamples, seed=own)
            for member, row in zip(members, stats, strict=True):
                low, high = percentile_interval(row)
                out[(member.model, member.benchmark)] = Interval(low=low, high=high)
            continue
        for member in members:
            interval = bootstrap_ci(member.values, member.counts, member.aggregation, resamples=resamples,
                                    seed=own)
            out[(member.model, member.benchmark)] = Interval(low=interval[0], high=interval[1]) if interval else None
    return out


def _by_benchmark(series: list[InstanceSeries]) -> dict[str, list[InstanceSeries]]:
    grouped: dict[str, list[InstanceSeries]] = defaultdict(list)
    for s in series:
        grouped[s.benchmark].append(s)
    return dict(sorted(grouped.items()))


def _common(a: InstanceSeries, b: InstanceSeries) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the instances both scored; none when they scored different versions of the dataset (the
    same id may be another item there, or carry another label), so no paired statistic pairs them."""
    index_b = {iid: i for i, iid in enumerate(b.ids)} if a.datasets == b.datasets else {}
    pairs = [(i, index_b[iid]) for i, iid in enumerate(a.ids) if iid in index_b]
    ia = np.array([p[0] for p in pairs], dtype=int)
    ib = np.array([p[1] for p in pairs], dtype=int)
    return ia, ib


def pairwise_differences(series: list[InstanceSeries], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                         unlike: Unlike = NO_UNLIKE) -> list[PairwiseDifference]:
    """Every ordered pair of models on every benchmark both were scored on, with a paired bootstrap CI; pairs in
    ``unlike`` (runs not comparable) are left out."""
    out = []
    for benchmark, members in _by_benchmark(series).items():
        table = None
        if resamples >= 1 and _shared_ids(members):
            table = bootstrap_matrix(np.stack([m.values for m in members]), _stack_counts(members),
                                     members[0].aggregation, resamples=resamples, seed=seed)
        for index, a in enumerate(members):
            for offset, b in enumerate(members[index + 1:], start=index + 1):
                if not comparable(unlike, benchmark, a.model, b.model):
                    continue
                ia, ib = _common(a, b)
                if len(ia) == 0:
                    continue
                counts_a = a.counts[ia] if a.counts is not None else None
                counts_b = b.counts[ib] if b.counts is not None else None
                if table is not None:
                    sa = statistic(a.values, a.counts, a.aggregation)
                    sb = statistic(b.values, b.counts, b.aggregation)
                    assert sa is not None and sb is not None
                    difference: float = sa - sb
                    interval: tuple[float, float] | None = percentile_interval(table[index] - table[offset])
                else:
                    difference, interval = paired_bootstrap_diff(a.values[ia], b.values[ib], counts_a, counts_b,
                                                                 a.aggregation, resamples=resamples, seed=seed)
                out.append(PairwiseDifference(
                    model=a.model, rival=b.model, benchmark=benchmark, difference=difference,
                    ci_low=interval[0] if interval else None, ci_high=interval[1] if interval else None,
                    n=len(ia)))
                # the reverse comparison is the same resamples negated
                out.append(PairwiseDifference(
                    model=b.model, rival=a.model, benchmark=benchmark, difference=-difference,
                    ci_low=-interval[1] if interval else None, ci_high=-interval[0] if interval else None,
                    n=len(ia)))
    return out


def item_set_differences(series: list[InstanceSeries], *, unlike: Unlike = NO_UNLIKE
                         ) -> dict[tuple[str, str], dict[str, ItemSetDifference]]:
    """(model, benchmark) -> rival -> how their scored items differ, for each pairing of comparable runs (not in
    ``unlike``) whose scores leave out different failed items; pairings over the same items are absent."""
    out: dict[tuple[str, str], dict[str, ItemSetDifference]] = {}
    for benchmark, members in _by_benchmark(series).items():
        for a in members:
            for b in members:
                if a is b or not comparable(unlike, benchmark, a.model, b.model):
                    continue
                own, theirs = set(a.ids), set(b.ids)
                if own != theirs:
                    out.setdefault((a.model, benchmark), {})[b.model] = ItemSetDifference(
                        only_own=len(own - theirs), only_rival=len(theirs - own))
    return out


def _on_common_items(own: InstanceSeries, rival: InstanceSeries) -> tuple[float | None, float | None]:
    """The two models' scores recomputed over the items both scored (None: no such item)."""
    ia, ib = _common(own, rival)
    return (statistic(own.values[ia], own.counts[ia] if own.counts is not None else None, own.aggregation),
            statistic(rival.values[ib], rival.counts[ib] if rival.counts is not None else None, rival.aggregation))


def common_items_win_rate(series: list[InstanceSeries], model: str, rule: WinRule = WinRule.PAPER, *,
                          unlike: Unlike = NO_UNLIKE) -> float | None:
    """The win rate with each (benchmark, rival) pairing decided over the items both models scored (each score
    recomputed over them, as the paired differences are): no pairing is won on items only one of the two was
    scored on. Rule and left-out pairings as :func:`win_rate`; None without a pairing. Reported beside the win
    rate, which stays the paper's (each model's own benchmark scores) and ranks the models."""
    fractions = []
    for benchmark, members in _by_benchmark(series).items():
        own = next((m for m in members if m.model == model), None)
        wins, rivals = 0.0, 0
        for rival in members:
            if own is None or rival is own or not comparable(unlike, benchmark, model, rival.model):
                continue
            mine, theirs = _on_common_items(own, rival)
            if mine is not None and theirs is not None:
                wins, rivals = wins + _win_value(mine, theirs, rule), rivals + 1
        if rivals:
            fractions.append((wins, rivals))
    return _mean_win(fractions, rule)


def item_set_lines(rows: list[ModelRow]) -> list[str]:
    """One sentence per benchmark whose compared scores are over different items: how many failed items each
    model's score there leaves out (the table's, the console's)."""
    lines = []
    for benchmark in sorted({b for row in rows for b in row.items_differ}):
        involved = {row.model for row in rows if benchmark in row.items_differ}
        counts = [f"{row.model}'s leaves out {s.n_failed} of its {s.n + s.n_failed}" for row in rows
                  if row.model in involved and (s := row.benchmarks.get(benchmark)) is not None]
        lines.append(f"{benchmark}: the scores compared are over different items (a failed item is left out of its "
                     f"model's score, never scored 0): {', '.join(counts)}. Win rates and macro averages compare "
                     "these scores as they are; the paired differences and MDE use only the items both models "
                     "scored")
    if lines:
        rates = ", ".join(f"{row.model} " + ("-" if (rate := row.win_rate_common_items) is None else f"{rate:.3f}")
                          for row in rows)
        lines.append(f"Win rate with each pairing decided over the items both models scored (win_rate_common_items): "
                     f"{rates}; the rank uses the win rate over each model's own scored items, as MedHELM's")
    return lines


def benchmark_mdes(series: list[InstanceSeries], *, unlike: Unlike = NO_UNLIKE) -> dict[str, BenchmarkMDE]:
    """Appendix E MDE per benchmark, over unordered model pairs whose runs are comparable (not in ``unlike``) and
    their common instances' differences."""
    out = {}
    for benchmark, members in _by_benchmark(series).items():
        differences = []
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if not comparable(unlike, benchmark, a.model, b.model):
                    continue
                ia, ib = _common(a, b)
                if len(ia):
                    differences.append(a.values[ia] - b.values[ib])
        result = mde(differences)
        if result is not None:
            out[benchmark] = BenchmarkMDE(benchmark=benchmark, mde=result[0], sd=result[1], pairs=result[2])
    return out
