"""From instance scores to a benchmark's score and its per-metric breakdown (aggregates only, no text)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from medhelm_local.records import InstanceScore
from medhelm_local.scoring.metrics import JURY, Aggregation, metric_aggregation


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


def aggregate_values(values: Sequence[float], counts: Sequence[dict[str, int]] | None,
                     aggregation: Aggregation) -> float | None:
    if not values:
        return None
    if aggregation == Aggregation.MICRO_F1 and counts is not None:
        tp = sum(c.get("tp", 0) for c in counts)
        fp = sum(c.get("fp", 0) for c in counts)
        fn = sum(c.get("fn", 0) for c in counts)
        return 1.0 if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    return sum(values) / len(values)


def gold_empty_stats(scored: Sequence[tuple[float, dict[str, Any]]]) -> tuple[int | None, float | None]:
    """``(n_gold_empty, score_nonempty_gold)`` over scored ``(value, details)`` pairs whose details say
    ``gold_empty``; ``(None, None)`` when none does (the metric has no empty gold)."""
    flagged = [(value, bool(details["gold_empty"])) for value, details in scored if "gold_empty" in details]
    if not flagged:
        return None, None
    nonempty = [value for value, empty in flagged if not empty]
    return sum(empty for _, empty in flagged), (sum(nonempty) / len(nonempty) if nonempty else None)


def _rate(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarise(benchmark: str, metric: str, scores: Sequence[InstanceScore]) -> Breakdown:
    """Summarise a benchmark's instance scores (main metric, plus secondary metric rows such as ROUGE-L)."""
    aggregation = metric_aggregation(metric)
    main = [s for s in scores if s.metric == metric]
    scored = [s for s in main if s.value is not None]
    failed = [s for s in main if s.value is None]
    counts = [s.details.get("counts", {}) for s in scored]
    values = [float(s.value) for s in scored if s.value is not None]
    breakdown = Breakdown(
        benchmark=benchmark, metric=metric, score=aggregate_values(values, counts, aggregation), n=len(scored),
        n_failed=len(failed),
        failures=dict(Counter(str(s.details.get("error", "unknown")) for s in failed)),
        parse_rate=_rate([bool(s.details["parsed"]) for s in scored if "parsed" in s.details]),
        strict_format_rate=_rate([bool(s.details["strict_format"]) for s in scored if "strict_format" in s.details]),
    )
    breakdown.n_gold_empty, breakdown.score_nonempty_gold = gold_empty_stats(
        [(float(s.value), s.details) for s in scored if s.value is not None])
    secondary: dict[str, list[float]] = defaultdict(list)
    for s in scored:
        for name, value in (s.details.get("sub") or {}).items():
            if value is not None:
                secondary[name].append(float(value))
    if metric == JURY:
        for s in scored:
            for name, value in (s.details.get("criteria") or {}).items():
                secondary[f"criterion:{name}"].append((float(value) - 1) / 4)
    for s in scores:
        if s.metric != metric and s.value is not None:
            secondary[s.metric].append(float(s.value))
    breakdown.secondary = {name: {"score": sum(v) / len(v), "n": len(v)} for name, v in sorted(secondary.items())}
    groups: dict[str, list[InstanceScore]] = defaultdict(list)
    for s in scored:
        if "group" in s.details:
            groups[str(s.details["group"])].append(s)
    breakdown.groups = {
        name: {"score": aggregate_values([float(s.value) for s in members if s.value is not None],
                                         [s.details.get("counts", {}) for s in members], aggregation),
               "n": len(members)}
        for name, members in sorted(groups.items())
    }
    return breakdown
