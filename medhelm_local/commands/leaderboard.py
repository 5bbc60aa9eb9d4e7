"""``leaderboard``: every model in the store, compared on the benchmarks it was run on."""

from __future__ import annotations

from typing import Any

import typer

from medhelm_local.analysis.aggregate import latest_scores
from medhelm_local.analysis.leaderboard import ModelRow, build_leaderboard
from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table
from medhelm_local.context import app_context
from medhelm_local.store import Store


def register(app: typer.Typer) -> None:
    app.command("leaderboard")(leaderboard)


def leaderboard_payload(rows: list[ModelRow]) -> list[dict[str, Any]]:
    return [
        {
            "model": r.model, "win_rate": r.win_rate, "macro_avg": r.macro_avg,
            "benchmarks": {b: {"metric": s.metric, "score": s.score, "n": s.n, "n_failed": s.n_failed}
                           for b, s in sorted(r.benchmarks.items())},
        }
        for r in rows
    ]


def print_leaderboard(rows: list[ModelRow]) -> None:
    benchmarks = sorted({b for r in rows for b in r.benchmarks})
    emit_table("leaderboard", ["model", "win rate", "macro avg", *benchmarks],
               [[r.model, r.win_rate, r.macro_avg,
                 *[(f"{r.benchmarks[b].score:.3f} (n={r.benchmarks[b].n})"
                    if b in r.benchmarks and r.benchmarks[b].score is not None else "-") for b in benchmarks]]
                for r in rows])


def leaderboard(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable.")) -> None:
    """Show the leaderboard over the latest finished run of each model and benchmark."""
    app_ctx = app_context(ctx)
    with Store.open(app_ctx.home) as store:
        rows = build_leaderboard(latest_scores(store))
    audit_event(app_ctx.home, app_ctx.actor, "leaderboard.view", role="informatics", models=len(rows))
    if as_json:
        emit_json(leaderboard_payload(rows))
    else:
        print_leaderboard(rows)
