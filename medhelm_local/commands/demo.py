"""``demo``: the whole pipeline on a laptop, offline, in a throwaway home."""

from __future__ import annotations

from pathlib import Path

import typer

from medhelm_local.commands.leaderboard import board_payload, print_board
from medhelm_local.console import emit_json, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.demo.run_demo import (
    SMOKE_TEST_NOTE,
    evaluate_demo,
    finish,
    jury_summary,
    new_demo_home,
    prepare,
)
from medhelm_local.home import Home


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    ctx: typer.Context,
    instances: int = typer.Option(20, "--instances", min=1, max=60, help="Instances per benchmark."),
    demo_home: Path | None = typer.Option(None, "--demo-home", help="Where to create the throwaway home "
                                          "[default: a new temporary directory]."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Run PubMedQA, a synthetic private benchmark and MedicationQA (jury-scored) on the embedded CPU model,
    offline."""
    actor = app_context(ctx).actor
    root = demo_home.resolve() if demo_home else new_demo_home()
    app_ctx = AppContext(home=Home(root), actor=actor)
    info(f"demo home (throwaway): {root}")
    counts = prepare(app_ctx)
    info("registered: " + ", ".join(f"{b} ({n} instances)" for b, n in counts.items()))
    info("starting the embedded model (llama.cpp, 127.0.0.1 only) ...")
    run_info = evaluate_demo(app_ctx, instances, show_progress=not as_json).run
    info("embedded model stopped.")
    board, report = finish(app_ctx)
    jury = jury_summary(app_ctx, run_info.run_id)
    if as_json:
        emit_json({"home": str(root), "run_id": run_info.run_id, "report": str(report),
                   "leaderboard": board_payload(board), "jury": jury, "note": SMOKE_TEST_NOTE})
        return
    print_board(board)
    for judge in jury:
        info(f"jury: {judge['benchmark']} judged by {judge['judge']} "
             f"(structured output: {', '.join(judge['structured_output']) or '-'}): "
             f"{judge['valid']}/{judge['judgments']} valid ratings, {judge['request_failed']} failed requests")
    info(f"aggregate-only report: {report}")
    info(SMOKE_TEST_NOTE)
