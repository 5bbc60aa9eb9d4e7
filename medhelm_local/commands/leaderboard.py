"""``leaderboard``: every model in the store, compared on the benchmarks it was run on."""

from __future__ import annotations

from typing import Any

import typer

from medhelm_local.analysis.aggregate import latest_runs, latest_scores, latest_series
from medhelm_local.analysis.leaderboard import (
    BenchmarkMDE,
    ModelRow,
    PairwiseDifference,
    WinRule,
    benchmark_mdes,
    build_leaderboard,
    pairwise_differences,
    resolve_category,
)
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES
from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.store import Store

COST_UNAVAILABLE = "cost unavailable: no cost function or no pricing configured for this model"


def register(app: typer.Typer) -> None:
    app.command("leaderboard")(leaderboard)


def _model_costs(store: Store, models: list[str], home: Any) -> dict[str, float | None]:
    """Total evaluation cost per model from the runner's cost function, when it exists; never invented."""
    import importlib

    try:
        cost_module = importlib.import_module("medhelm_local.analysis.cost")  # written by the runner stage
    except ImportError:
        return {}
    run_cost = getattr(cost_module, "run_cost", None)
    if run_cost is None:
        return {}
    totals: dict[str, float | None] = {}
    runs = latest_runs(store)
    for model in models:
        run_ids = sorted({run_id for (m, _), run_id in runs.items() if m == model})
        total: float | None = 0.0
        for run_id in run_ids:
            try:
                value = run_cost(store, run_id, home.config)
            except Exception:  # cost is secondary; an unusable pricing config must not hide the leaderboard
                value = None
            amount = getattr(value, "total", value)
            if not isinstance(amount, int | float):
                total = None
                break
            total = (total or 0.0) + float(amount)
        totals[model] = total if run_ids else None
    return totals


def leaderboard_payload(rows: list[ModelRow], *, pairwise: list[PairwiseDifference] | None = None,
                        mdes: dict[str, BenchmarkMDE] | None = None) -> list[dict[str, Any]]:
    """One object per model: win_rate, win_sd, macro_avg, sd, categories, cost, and per benchmark score, CI, n
    (and the benchmark's MDE); ``pairwise`` adds each rival's paired differences."""
    mdes = mdes or {}
    payload = []
    for r in rows:
        benchmarks = {}
        for b, s in sorted(r.benchmarks.items()):
            interval = r.ci.get(b)
            entry: dict[str, Any] = {"metric": s.metric, "score": s.score,
                                     "ci_low": interval.low if interval else None,
                                     "ci_high": interval.high if interval else None,
                                     "n": s.n, "n_failed": s.n_failed}
            if b in mdes:
                entry["mde"] = mdes[b].mde
                entry["mde_sd"] = mdes[b].sd
            benchmarks[b] = entry
        row: dict[str, Any] = {
            "model": r.model, "win_rate": r.win_rate, "win_sd": r.win_sd, "win_rule": r.win_rule.value,
            "macro_avg": r.macro_avg, "sd": r.sd, "n_benchmarks": len(r.benchmarks), "categories": r.categories,
            "cost": r.cost, "benchmarks": benchmarks,
        }
        if pairwise is not None:
            rivals: dict[str, dict[str, Any]] = {}
            for d in pairwise:
                if d.model == r.model:
                    rivals.setdefault(d.rival, {})[d.benchmark] = {
                        "difference": d.difference, "ci_low": d.ci_low, "ci_high": d.ci_high, "n": d.n}
            row["pairwise"] = rivals
        payload.append(row)
    return payload


def _cell(row: ModelRow, benchmark: str) -> str:
    score = row.benchmarks.get(benchmark)
    if score is None or score.score is None:
        return "-"
    interval = row.ci.get(benchmark)
    ci = f" [{interval.low:.3f}, {interval.high:.3f}]" if interval else ""
    return f"{score.score:.3f}{ci} (n={score.n})"


def print_leaderboard(rows: list[ModelRow], *, mdes: dict[str, BenchmarkMDE] | None = None,
                      pairwise: list[PairwiseDifference] | None = None) -> None:
    benchmarks = sorted({b for r in rows for b in r.benchmarks})
    categories = sorted({c for r in rows for c in r.categories})
    rule = rows[0].win_rule.value if rows else WinRule.PAPER.value
    emit_table(f"leaderboard (win rule: {rule})",
               ["model", "win rate", "win sd", "macro avg", "sd", "cost", *categories, *benchmarks],
               [[r.model, r.win_rate, r.win_sd, r.macro_avg, r.sd, r.cost,
                 *[r.categories.get(c) for c in categories], *[_cell(r, b) for b in benchmarks]] for r in rows])
    if mdes:
        emit_table("minimum detectable effect (alpha 0.05, power 0.8)", ["benchmark", "mde", "sd", "pairs"],
                   [[m.benchmark, m.mde, m.sd, m.pairs] for m in mdes.values()])
    if pairwise:
        emit_table("paired differences (model - rival, bootstrap 95% CI)",
                   ["model", "rival", "benchmark", "difference", "ci low", "ci high", "n"],
                   [[d.model, d.rival, d.benchmark, d.difference, d.ci_low, d.ci_high, d.n]
                    for d in pairwise if d.model < d.rival])
    if rows and all(r.cost is None for r in rows):
        info(COST_UNAVAILABLE)


def leaderboard(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable."),
    category: str | None = typer.Option(None, "--category", help="Only the benchmarks of this category."),
    ties: WinRule = typer.Option(WinRule.PAPER, "--win-rule",
                                 help="paper: a win when score >= rival's (default); helm: half a win for a tie."),
    resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples", min=0, max=100_000,
                                  help="Bootstrap resamples for the 95% CIs (0: no CIs)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
) -> None:
    """Show the leaderboard over the latest finished run of each model and benchmark."""
    app_ctx = app_context(ctx)
    resolved = resolve_category(category) if category else None
    with Store.open(app_ctx.home) as store:
        results = latest_scores(store)
        series = latest_series(store)
        costs = _model_costs(store, sorted({r.model for r in results}), app_ctx.home)
    rows = build_leaderboard(results, series=series, rule=ties, category=resolved, resamples=resamples, seed=seed,
                             costs=costs)
    pairwise = pairwise_differences(series, category=resolved, resamples=resamples, seed=seed)
    mdes = benchmark_mdes(series, category=resolved)
    audit_event(app_ctx.home, app_ctx.actor, "leaderboard.view", role="informatics", models=len(rows),
                category=resolved)
    if as_json:
        emit_json(leaderboard_payload(rows, pairwise=pairwise, mdes=mdes))
    else:
        print_leaderboard(rows, mdes=mdes, pairwise=pairwise)
