"""The leaderboard: per-benchmark scores, pairwise win-rate (MedHELM's rule) and macro-average."""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel

from medhelm_local.records import BenchmarkScore


class ModelRow(BaseModel):
    model: str
    win_rate: float | None
    macro_avg: float | None
    benchmarks: dict[str, BenchmarkScore]


def win_rate(scores: dict[str, dict[str, float]], model: str) -> float | None:
    """MedHELM 4.3.2: per benchmark, a model wins against each rival whose score it meets or beats
    (score >= rival's). Averaged over all (benchmark, rival) pairs where both have a score."""
    wins = pairs = 0
    for benchmark, own in scores[model].items():
        for rival, rival_scores in scores.items():
            if rival == model or benchmark not in rival_scores:
                continue
            pairs += 1
            wins += int(own >= rival_scores[benchmark])
    return wins / pairs if pairs else None


def build_leaderboard(results: list[BenchmarkScore]) -> list[ModelRow]:
    per_model: dict[str, dict[str, BenchmarkScore]] = defaultdict(dict)
    numeric: dict[str, dict[str, float]] = defaultdict(dict)
    for result in results:
        per_model[result.model][result.benchmark] = result
        if result.score is not None:
            numeric[result.model][result.benchmark] = result.score
    rows = []
    for model, benchmarks in per_model.items():
        values = list(numeric[model].values())
        rows.append(ModelRow(
            model=model,
            win_rate=win_rate(numeric, model) if len(per_model) > 1 else None,
            macro_avg=sum(values) / len(values) if values else None,
            benchmarks=benchmarks,
        ))
    rows.sort(key=lambda r: (-(r.win_rate or 0), -(r.macro_avg or 0), r.model))
    return rows
