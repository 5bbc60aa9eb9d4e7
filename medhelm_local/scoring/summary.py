"""From instance scores to a benchmark's score and its per-metric breakdown (aggregates only, no text)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, Field

from medhelm_local.records import InstanceScore
from medhelm_local.scoring.details import ScoreDetails
from medhelm_local.scoring.registry import metric_aggregation, read_details, secondary_values
from medhelm_local.scoring.scorer import Aggregation


class Breakdown(BaseModel):
    """The score of one benchmark and what it is made of."""

    benchmark: str
    metric: str
    score: float | None  # 0-1; None when no instance could be scored
    n: int  # instances that contributed
    n_failed: int  # instances excluded: request failed, no valid judgement, gold not runnable
    failures: dict[str, int] = Field(default_factory=dict)  # failure category -> count
    parse_rate: float | None = None  # share of scored outputs from which an answer could be read
    strict_format_rate: float | None = None  # share of scored outputs that were nothing but the answer
    secondary: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)  # name -> {score, n}
    groups: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)  # group -> {score, n}
    # Instances whose gold is empty (details "gold_empty": EHRSQL gold queries returning no rows) and the score
    # on the instances with a non-empty gold; None when the metric has no such notion.
    n_gold_empty: int | None = None
    score_nonempty_gold: float | None = None


def aggregate_values(values: Sequence[float], details: Sequence[ScoreDetails] | None,
                     aggregation: Aggregation) -> float | None:
    """A benchmark's score from its scored instances' values (and details: micro-F1 sums their counts)."""
    if not values:
        return None
    if aggregation == Aggregation.MICRO_F1 and details is not None:
        counts = [d.counts for d in details if d.counts is not None]
        tp = sum(c.tp for c in counts)
        fp = sum(c.fp for c in counts)
        fn = sum(c.fn for c in counts)
        return 1.0 if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    return sum(values) / len(values)


def gold_empty_stats(scored: Sequence[tuple[float, ScoreDetails]]) -> tuple[int | None, float | None]:
    """``(n_gold_empty, score_nonempty_gold)`` over scored ``(value, details)`` pairs whose details say
    ``gold_empty``; ``(None, None)`` when none does (the metric has no empty gold)."""
    flagged = [(value, bool(details.gold_empty)) for value, details in scored if details.gold_empty is not None]
    if not flagged:
        return None, None
    nonempty = [value for value, empty in flagged if not empty]
    return sum(empty for _, empty in flagged), (sum(nonempty) / len(nonempty) if nonempty else None)


def _rate(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarise(benchmark: str, metric: str, scores: Sequence[InstanceScore]) -> Breakdown:
    """Summarise a benchmark's instance scores (main metric, plus secondary metric rows such as ROUGE-L)."""
    aggregation = metric_aggregation(metric)
    main = [(s, read_details(metric, s.details)) for s in scores if s.metric == metric]
    scored = [(float(s.value), d) for s, d in main if s.value is not None]
    failed = [d for s, d in main if s.value is None]
    details = [d for _, d in scored]
    values = [v for v, _ in scored]
    breakdown = Breakdown(
        benchmark=benchmark, metric=metric, score=aggregate_values(values, details, aggregation), n=len(scored),
        n_failed=len(failed),
        failures=dict(Counter(str(d.error or "unknown") for d in failed)),
        parse_rate=_rate([d.parsed for d in details if d.parsed is not None]),
        strict_format_rate=_rate([d.strict_format for d in details if d.strict_format is not None]),
    )
    breakdown.n_gold_empty, breakdown.score_nonempty_gold = gold_empty_stats(scored)
    secondary: dict[str, list[float]] = defaultdict(list)
    for d in details:
        for name, value in secondary_values(metric, d).items():
            secondary[name].append(value)
    for s in scores:
        if s.metric != metric and s.value is not None:
            secondary[s.metric].append(float(s.value))
    breakdown.secondary = {name: {"score": sum(v) / len(v), "n": len(v)} for name, v in sorted(secondary.items())}
    groups: dict[str, list[tuple[float, ScoreDetails]]] = defaultdict(list)
    for value, d in scored:
        if d.group is not None:
            groups[d.group].append((value, d))
    breakdown.groups = {
        name: {"score": aggregate_values([v for v, _ in members], [d for _, d in members], aggregation),
               "n": len(members)}
        for name, members in sorted(groups.items())
    }
    return breakdown
