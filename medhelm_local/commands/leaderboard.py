"""``leaderboard``: every model in the store, compared on the benchmarks it was run on."""

from __future__ import annotations

from typing import Any

import typer

from medhelm_local.analysis.board import Board, load_board
from medhelm_local.analysis.comparability import comparability_lines
from medhelm_local.analysis.leaderboard import (
    SD_UNDEFINED,
    SD_UNDEFINED_NOTE,
    UNRANKED,
    WIN_RATE_LEFT_OUT,
    BenchmarkMDE,
    ModelRow,
    PairwiseDifference,
    WinRule,
    cost_unknown_why,
    item_set_lines,
    newer_run_lines,
    resolve_category,
)
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES
from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.formatting import money
from medhelm_local.prompts.styles import DEFAULT_STYLE, check_style

COST_UNAVAILABLE = "cost unavailable: no pricing configured (models and judges need `pricing` in appliance.yaml)"


def register(app: typer.Typer) -> None:
    app.command("leaderboard")(leaderboard)


def leaderboard_payload(rows: list[ModelRow], *, pairwise: list[PairwiseDifference] | None = None,
                        mdes: dict[str, BenchmarkMDE] | None = None) -> list[dict[str, Any]]:
    """One object per model, in rank order: its rank (null: unranked, and ``unranked_reason``), win_rate, win_sd, the
    pairings the win rate counts and leaves out (not comparable),
    macro_avg, sd, categories, cost, and per benchmark score, CI, n, the run it is from and the newer runs not shown,
    the comparable rivals whose scores are over other items (and the benchmark's MDE); ``pairwise`` adds each rival's
    paired differences."""
    mdes = mdes or {}
    payload = []
    for r in rows:
        benchmarks = {}
        for b, s in sorted(r.benchmarks.items()):
            interval = r.ci.get(b)
            entry: dict[str, Any] = {"metric": s.metric, "score": s.score,
                                     "ci_low": interval.low if interval else None,
                                     "ci_high": interval.high if interval else None,
                                     "n": s.n, "n_failed": s.n_failed, **r.format_rates.get(b, {})}
            if s.n_gold_empty is not None:
                entry["n_gold_empty"] = s.n_gold_empty
                entry["score_nonempty_gold"] = s.score_nonempty_gold
            if b in r.judge_failures:
                entry["judge_failure_rates"] = r.judge_failures[b]
            if b in r.prompt_sha256:
                entry["prompt_sha256"] = r.prompt_sha256[b]
            if b in r.run_ids:
                entry["run_id"] = r.run_ids[b]
            entry["newer_runs_not_shown"] = [run.model_dump() for run in r.newer_runs.get(b, [])]
            entry["not_comparable_with"] = r.not_comparable.get(b, {})
            entry["scored_items_differ_from"] = {rival: difference.model_dump()
                                                 for rival, difference in r.items_differ.get(b, {}).items()}
            entry["dataset_current"] = r.dataset_current.get(b, True)
            if b in mdes:
                entry["mde"] = mdes[b].mde
                entry["mde_sd"] = mdes[b].sd
            benchmarks[b] = entry
        row: dict[str, Any] = {
            "model": r.model, "rank": r.rank, "unranked_reason": r.unranked_reason, "prompt_style": r.prompt_style,
            "win_rate": r.win_rate, "win_rate_common_items": r.win_rate_common_items, "win_sd": r.win_sd,
            "win_rule": r.win_rule.value, "win_pairs": r.win_pairs, "win_pairs_left_out": r.win_pairs_left_out,
            "macro_avg": r.macro_avg, "sd": r.sd, "n_benchmarks": len(r.benchmarks),
            "unscored_benchmarks": r.unscored, "categories": r.categories,
            "cost": r.cost, "cost_detail": r.cost_detail, "pareto": r.pareto, "benchmarks": benchmarks,
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
    """A benchmark's score, CI and n, and how many instances failed (never hidden; a cell whose every instance
    failed reads as failed, not as a benchmark never run)."""
    score = row.benchmarks.get(benchmark)
    if score is None:
        return "-"
    counts = f"n={score.n}" + (f", {score.n_failed} failed" if score.n_failed else "")
    if score.score is None:
        return f"- ({counts})" if score.n_failed else "-"
    interval = row.ci.get(benchmark)
    ci = f" [{interval.low:.3f}, {interval.high:.3f}]" if interval else ""
    empty = ""
    if score.n_gold_empty is not None:
        nonempty = "-" if score.score_nonempty_gold is None else f"{score.score_nonempty_gold:.3f}"
        empty = f" [empty gold {score.n_gold_empty}; non-empty gold {nonempty}]"
    share = row.format_rates.get(benchmark, {}).get("truncated_share")
    cut = f" [prompts truncated to fit: {share:.0%}]" if share else ""
    marks = [*(["another dataset version"] if not row.dataset_current.get(benchmark, True) else []),
             *(["not comparable"] if benchmark in row.not_comparable else []),
             *(["a newer run not shown"] if benchmark in row.newer_runs else []),
             *(["other items than a rival's"] if benchmark in row.items_differ else [])]
    unlike = f" [{'; '.join(marks)}: see below]" if marks else ""
    return f"{score.score:.3f}{ci} ({counts}){empty}{cut}{unlike}"


def _sd(sd: float | None, of: float | None) -> float | str | None:
    """An SD as the table shows it: undefined (n/a) where the value it spreads around exists but rests on fewer than
    two values; a dash where there is nothing at all."""
    return SD_UNDEFINED if sd is None and of is not None else sd


def print_leaderboard(rows: list[ModelRow], *, mdes: dict[str, BenchmarkMDE] | None = None,
                      pairwise: list[PairwiseDifference] | None = None, prompt_style: str = DEFAULT_STYLE,
                      win_rule: WinRule = WinRule.PAPER) -> None:
    benchmarks = sorted({b for r in rows for b in r.benchmarks})
    categories = sorted({c for r in rows for c in r.categories})
    rule = rows[0].win_rule.value if rows else win_rule.value  # an empty board still names what was asked
    style = rows[0].prompt_style if rows else prompt_style
    emit_table(f"leaderboard (prompt style: {style}; win rule: {rule})",
               ["model", "rank", "win rate", "win sd", "macro avg", "sd", "cost", "pareto", *categories, *benchmarks],
               [[r.model, UNRANKED if r.rank is None else r.rank,
                 WIN_RATE_LEFT_OUT if r.win_rate_left_out else r.win_rate, _sd(r.win_sd, r.win_rate), r.macro_avg,
                 _sd(r.sd, r.macro_avg), money(r.cost, unknown="unavailable"),
                 None if r.pareto is None else "yes" if r.pareto else "no",
                 *[r.categories.get(c) for c in categories],
                 *[_cell(r, b) for b in benchmarks]] for r in rows])
    if mdes:
        emit_table("minimum detectable effect (alpha 0.05, power 0.8)", ["benchmark", "mde", "sd", "pairs"],
                   [[m.benchmark, m.mde, _sd(m.sd, m.mde), m.pairs] for m in mdes.values()])
    if pairwise:
        emit_table("paired differences (model - rival, bootstrap 95% CI)",
                   ["model", "rival", "benchmark", "difference", "ci low", "ci high", "n"],
                   [[d.model, d.rival, d.benchmark, d.difference, d.ci_low, d.ci_high, d.n]
                    for d in pairwise if d.model < d.rival])
    for r in rows:
        if r.unranked_reason is not None:
            info(f"{r.model}: {UNRANKED}, no win rate: {r.unranked_reason}")
    for r in rows:
        if r.unscored:
            info(f"{r.model}: no scored instance on {', '.join(r.unscored)} (every request or judgement failed); "
                 "its win rate, macro average and Pareto place leave them out: read them as incomplete")
    if any(_sd(sd, of) == SD_UNDEFINED for sd, of in [*((r.sd, r.macro_avg) for r in rows),
                                                       *((r.win_sd, r.win_rate) for r in rows),
                                                       *((m.sd, m.mde) for m in (mdes or {}).values())]):
        info(SD_UNDEFINED_NOTE)
    for line in [*comparability_lines(rows), *item_set_lines(rows), *newer_run_lines(rows)]:
        info(line)
    unpriced = [r for r in rows if r.cost is None]
    if rows and len(unpriced) == len(rows):
        info(COST_UNAVAILABLE)
    elif unpriced:
        info("cost unavailable for " + ", ".join(f"{r.model} ({cost_unknown_why(r)})" for r in unpriced)
             + "; the pareto column compares only the models with a cost")


def board_payload(board: Board) -> list[dict[str, Any]]:
    """``leaderboard --json``: :func:`leaderboard_payload` with the board's paired differences and MDEs."""
    return leaderboard_payload(board.rows, pairwise=board.pairwise, mdes=board.mdes)


def print_board(board: Board, *, prompt_style: str = DEFAULT_STYLE, win_rule: WinRule = WinRule.PAPER) -> None:
    """``leaderboard`` as a table: :func:`print_leaderboard`, and the finished runs of other prompt styles not shown."""
    print_leaderboard(board.rows, mdes=board.mdes, pairwise=board.pairwise, prompt_style=prompt_style,
                      win_rule=win_rule)
    for style, count in board.other_styles.items():
        info(f"{count} finished run(s) of prompt style {style!r} not shown: "
             f"`medhelm-local leaderboard --prompt-style {style}`")


def leaderboard(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable."),
    category: str | None = typer.Option(None, "--category",
                                         help="Only the benchmarks of this category (and the cost of their runs)."),
    ties: WinRule = typer.Option(WinRule.PAPER, "--win-rule",
                                 help="paper: a win when score >= rival's, over all (benchmark, rival) pairs "
                                      "(default); helm: half a win for a tie, per-benchmark fractions averaged."),
    resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples", min=0, max=100_000,
                                  help="Bootstrap resamples for the 95% CIs (0: no CIs)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    prompt_style: str = typer.Option(DEFAULT_STYLE, "--prompt-style",
                                     help="Only runs of this prompt style: default or medhelm (styles never mix)."),
) -> None:
    """Show the leaderboard over the newest finished run that scored each model's benchmark (of one prompt style)."""
    app_ctx = app_context(ctx)
    specs = app_ctx.specs
    resolved = resolve_category(category, specs) if category else None
    check_style(prompt_style)
    # read-only: works during a run (issue 12 §6)
    board = load_board(app_ctx.open_store(read_only=True), specs, app_ctx.home.config, prompt_style=prompt_style,
                       rule=ties, category=resolved, resamples=resamples, seed=seed, home=app_ctx.home)
    audit_event(app_ctx.home, app_ctx.actor, "leaderboard.view", role="informatics", models=len(board.rows),
                category=resolved)
    if as_json:
        emit_json(board_payload(board))
    else:
        print_board(board, prompt_style=prompt_style, win_rule=ties)
