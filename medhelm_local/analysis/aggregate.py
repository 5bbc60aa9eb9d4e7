"""From instance scores to the aggregates a leaderboard and an export show."""

from __future__ import annotations

from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.records import BenchmarkScore
from medhelm_local.store.store import Store


def benchmark_score(store: Store, run_id: str, model: str, benchmark: str) -> BenchmarkScore:
    """Mean of the scored instances; failed ones are counted apart, never scored as zero."""
    metric = get_spec(benchmark).metric
    values = [v for _, v in store.score_values(run_id, benchmark, metric)]
    scored = [v for v in values if v is not None]
    return BenchmarkScore(
        model=model, benchmark=benchmark, metric=metric,
        score=(sum(scored) / len(scored)) if scored else None,
        n=len(scored), n_failed=len(values) - len(scored),
    )


def latest_scores(store: Store) -> list[BenchmarkScore]:
    """For each (model, benchmark), the score of the most recent finished run that covered it."""
    chosen: dict[tuple[str, str], str] = {}
    for run in store.list_runs():  # oldest first, so later runs overwrite
        if run.status != "finished":
            continue
        for benchmark in run.benchmarks:
            chosen[(run.model, benchmark)] = run.run_id
    return [benchmark_score(store, run_id, model, benchmark) for (model, benchmark), run_id in
            sorted(chosen.items())]
