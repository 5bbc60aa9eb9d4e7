"""From instance scores to the aggregates a leaderboard and an export show."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel

from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.prompts.styles import DEFAULT_STYLE, run_prompt_style, spec_for_run
from medhelm_local.records import BenchmarkScore
from medhelm_local.scoring.registry import metric_aggregation, read_details, scorer_for
from medhelm_local.scoring.scorer import Aggregation
from medhelm_local.scoring.summary import aggregate_values, gold_empty_stats
from medhelm_local.store.judgments import judge_failure_rates, score_rows, scored_count
from medhelm_local.store.store import RunInfo, Store

if TYPE_CHECKING:  # numpy is imported where a series is built: a `run` (benchmark_score) needs none of it
    import numpy as np


@dataclass
class InstanceSeries:
    """The scored instances of one model on one benchmark (from one run): what the statistics resample."""

    model: str
    benchmark: str
    metric: str
    run_id: str
    aggregation: Aggregation
    ids: list[str]
    values: np.ndarray  # per-instance values, aligned with ids
    counts: np.ndarray | None = None  # (n, 3) tp/fp/fn for micro-F1 metrics
    n_failed: int = 0
    extra: dict[str, float] = field(default_factory=dict)  # parse_rate, strict_format_rate
    judge_failure_rates: dict[str, float] = field(default_factory=dict)  # jury benchmarks: judge -> rate
    # the dataset versions its run planned from: an instance id of another version may be another item, or have
    # another label (the extract was corrected and registered again)
    datasets: frozenset[str] = frozenset()

    @property
    def score(self) -> float | None:
        return statistic(self.values, self.counts, self.aggregation)


def statistic(values: np.ndarray, counts: np.ndarray | None, aggregation: Aggregation) -> float | None:
    if len(values) == 0:
        return None
    if aggregation == Aggregation.MICRO_F1 and counts is not None:
        tp, fp, fn = counts.sum(axis=0)
        denominator = 2 * tp + fp + fn
        return 1.0 if denominator == 0 else float(2 * tp / denominator)
    return float(values.mean())


def run_metric(store: Store, specs: SpecRegistry, run_id: str, benchmark: str) -> str:
    """The metric the run scored ``benchmark`` with (its frozen spec's, not the current file's)."""
    run = store.get_run(run_id)
    return spec_for_run(benchmark, run.manifest if run is not None else None, specs).metric


def truncated_share(store: Store, run_id: str, benchmark: str) -> float | None:
    """The share of a benchmark's answered or failed instances whose prompt was cut to fit the model's context
    (None: the run was created before prompts were fitted, or has no outcome for it)."""
    from medhelm_local.store.runs import truncation_counts

    run = store.get_run(run_id)
    if run is None or not (run.manifest or {}).get("context"):
        return None
    cut, total = truncation_counts(store, run_id).get(benchmark, (0, 0))
    return cut / total if total else None


def instance_series(store: Store, specs: SpecRegistry, run_id: str, model: str, benchmark: str) -> InstanceSeries:
    import numpy as np

    metric = run_metric(store, specs, run_id, benchmark)
    aggregation = metric_aggregation(metric)
    rows = score_rows(store, run_id, benchmark, metric)
    scored = [(iid, value, read_details(metric, details)) for iid, _, value, details in rows if value is not None]
    counts = None
    if aggregation == Aggregation.MICRO_F1:
        counts = np.array([[getattr(d.counts, k) if d.counts else 0 for k in ("tp", "fp", "fn")]
                           for _, _, d in scored], dtype=float).reshape(-1, 3)
    extra = {}
    for flags, name in (([d.parsed for _, _, d in scored if d.parsed is not None], "parse_rate"),
                        ([d.strict_format for _, _, d in scored if d.strict_format is not None],
                         "strict_format_rate")):
        if flags:
            extra[name] = sum(flags) / len(flags)
    share = truncated_share(store, run_id, benchmark)
    if share is not None:
        extra["truncated_share"] = share
    judges = {}
    scorer = scorer_for(metric)
    if scorer is not None and scorer.calls_models:
        judges = {r.judge: r.failure_rate for r in judge_failure_rates(store, run_id, benchmark)}
    return InstanceSeries(
        model=model, benchmark=benchmark, metric=metric, run_id=run_id, aggregation=aggregation,
        ids=[iid for iid, _, _ in scored], values=np.array([v for _, v, _ in scored], dtype=float),
        counts=counts, n_failed=len(rows) - len(scored), extra=extra, judge_failure_rates=judges,
        datasets=store.run_dataset_versions(run_id, benchmark),
    )


def benchmark_score(store: Store, specs: SpecRegistry, run_id: str, model: str, benchmark: str) -> BenchmarkScore:
    """The benchmark's score over its scored instances (mean, or micro-F1 for multi-label metrics); failed
    ones are counted apart, never scored as zero."""
    metric = run_metric(store, specs, run_id, benchmark)
    rows = score_rows(store, run_id, benchmark, metric)
    scored = [(float(value), read_details(metric, details)) for _, _, value, details in rows if value is not None]
    score = aggregate_values([v for v, _ in scored], [d for _, d in scored], metric_aggregation(metric))
    n_gold_empty, score_nonempty_gold = gold_empty_stats(scored)
    return BenchmarkScore(model=model, benchmark=benchmark, metric=metric, score=score, n=len(scored),
                          n_failed=len(rows) - len(scored), n_gold_empty=n_gold_empty,
                          score_nonempty_gold=score_nonempty_gold)


class NewerRun(BaseModel):
    """A run of a model on a benchmark newer than the one the leaderboard shows, and its status: ``finished`` (it
    scored no instance of the benchmark: every request or judgement failed), or not finished (``interrupted``,
    ``failed``, ``running``; ``inferred``: answered, not scored yet)."""

    run_id: str
    status: str
    # For a ``running`` run, whether a process sends it (``runner.liveness.run_live``): False, it was killed (what
    # `runs list` shows as interrupted); None, not told. The status stays as stored, as in `runs list --json`.
    live: bool | None = None


@dataclass
class ShownRuns:
    """Which run the leaderboard shows for each (model, benchmark), and the newer runs it passes over."""

    chosen: dict[tuple[str, str], str]
    newer: dict[tuple[str, str], list[NewerRun]]  # newest first; absent: the run shown is the newest


def shown_runs(store: Store, specs: SpecRegistry, prompt_style: str = DEFAULT_STYLE, *,
               live: Callable[[RunInfo], bool | None] | None = None) -> ShownRuns:
    """For each (model, benchmark), the newest finished run of ``prompt_style`` that scored at least one of its
    instances; where none did, the newest finished run (its cell shows the failures). A newer run that failed,
    was interrupted, is still running or scored nothing never replaces a good result silently, nor is it hidden:
    it is named in ``newer``, a ``running`` one with whether a process sends it (``live``, where the caller can
    tell). Runs of different prompt styles are never mixed in one leaderboard."""
    chosen: dict[tuple[str, str], str] = {}
    fallback: dict[tuple[str, str], tuple[str, int]] = {}  # the newest finished run, and how many newer ones
    newer: dict[tuple[str, str], list[NewerRun]] = defaultdict(list)
    for run in reversed(store.list_runs()):  # newest first
        if run_prompt_style(run.manifest) != prompt_style:
            continue
        for benchmark in run.benchmarks:
            key = (run.model, benchmark)
            if key in chosen:
                continue
            if run.status == "finished" and scored_count(store, run.run_id, benchmark,
                                                         run_metric(store, specs, run.run_id, benchmark)):
                chosen[key] = run.run_id
                continue
            if run.status == "finished" and key not in fallback:
                fallback[key] = (run.run_id, len(newer[key]))
            sending = live(run) if live is not None and run.status == "running" else None
            newer[key].append(NewerRun(run_id=run.run_id, status=run.status, live=sending))
    for key, (run_id, newer_count) in fallback.items():
        if key not in chosen:
            chosen[key], newer[key] = run_id, newer[key][:newer_count]
    return ShownRuns(chosen=dict(sorted(chosen.items())),
                     newer={key: runs for key, runs in sorted(newer.items()) if key in chosen and runs})


def latest_runs(store: Store, specs: SpecRegistry, prompt_style: str = DEFAULT_STYLE) -> dict[tuple[str, str], str]:
    """(model, benchmark) -> the run the leaderboard shows (:func:`shown_runs`)."""
    return shown_runs(store, specs, prompt_style).chosen


def scores_of(store: Store, specs: SpecRegistry, chosen: dict[tuple[str, str], str]) -> list[BenchmarkScore]:
    return [benchmark_score(store, specs, run_id, model, benchmark) for (model, benchmark), run_id in chosen.items()]


def series_of(store: Store, specs: SpecRegistry, chosen: dict[tuple[str, str], str]) -> list[InstanceSeries]:
    """Per-instance values behind :func:`scores_of`, for bootstrap CIs, paired differences and MDE."""
    return [instance_series(store, specs, run_id, model, benchmark) for (model, benchmark), run_id in chosen.items()]


def latest_scores(store: Store, specs: SpecRegistry, prompt_style: str = DEFAULT_STYLE) -> list[BenchmarkScore]:
    """For each (model, benchmark), the score of the run the leaderboard shows (:func:`shown_runs`)."""
    return scores_of(store, specs, latest_runs(store, specs, prompt_style))


def latest_series(store: Store, specs: SpecRegistry, prompt_style: str = DEFAULT_STYLE) -> list[InstanceSeries]:
    """Per-instance values behind :func:`latest_scores`."""
    return series_of(store, specs, latest_runs(store, specs, prompt_style))


def finished_runs_by_style(store: Store) -> dict[str, int]:
    """How many finished runs each prompt style has (the leaderboard shows one style at a time)."""
    counts: dict[str, int] = {}
    for run in store.list_runs():
        if run.status == "finished":
            style = run_prompt_style(run.manifest)
            counts[style] = counts.get(style, 0) + 1
    return dict(sorted(counts.items()))
