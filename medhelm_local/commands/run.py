"""``run``: evaluate a model on benchmarks; every response is committed as it arrives.

The same command after a crash resumes the unfinished run with the same plan; ``--resume RUN_ID`` and
``--retry-errors RUN_ID`` name a run; ``--shard I/N`` runs one slice of a run split across pods. A run adding to
an existing run sends with that run's own ``--concurrency``, ``--initial-concurrency``, ``--request-timeout`` and
``--max-retries`` unless they are given again.
"""

from __future__ import annotations

from typing import Any

import typer

from medhelm_local.application.evaluation import EvaluationRequest, Mode, RunOutcome, Selection, Sending, evaluate
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.deployment import send_again_hint
from medhelm_local.errors import BadInputError
from medhelm_local.formatting import duration
from medhelm_local.inference.client import MODEL_MISMATCH
from medhelm_local.prompts.styles import check_style, run_prompt_style
from medhelm_local.records import BenchmarkScore
from medhelm_local.runner.plan import ORDER_MODES, parse_shard
from medhelm_local.scoring.jury import JURY
from medhelm_local.scoring.jury_hints import UNKNOWN_HINT, failure_hint
from medhelm_local.store.store import RunInfo


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def parse_benchmarks(value: str) -> list[str]:
    names = [b.strip() for b in value.split(",") if b.strip()]
    if not names:
        raise BadInputError("--benchmarks: expected a comma-separated list of benchmark ids")
    return names


def results_payload(run: RunInfo, results: list[BenchmarkScore]) -> dict[str, object]:
    return {
        "run_id": run.run_id, "model": run.model, "status": run.status,
        "prompt_style": run_prompt_style(run.manifest),
        "results": [r.model_dump() for r in results],
    }


def outcome_payload(outcome: RunOutcome) -> dict[str, Any]:
    payload: dict[str, Any] = results_payload(outcome.run, outcome.results)
    report = outcome.report
    payload.update({
        "mode": outcome.mode, "shard": outcome.shard, "complete": outcome.complete, "merged": outcome.merged,
        "already_present": outcome.already_present, "errors": outcome.errors, "sending": outcome.sending,
        "session": None if report is None else {
            "session_id": report.session_id, "sent": report.sent, "ok": report.ok, "errors": report.errors,
            "prompt_tokens": report.prompt_tokens, "completion_tokens": report.completion_tokens,
            "wall_s": round(report.wall_s, 3), "cpu_s": round(report.cpu_s, 3),
            "peak_concurrency": report.peak_concurrency,
            "concurrency_steps": [list(step) for step in report.concurrency_history[:32]],
            "prompts_counted": report.counted, "prompts_truncated": report.truncated,
            "scored_as_answered": report.scored,
            "endpoints": report.endpoints,
        },
    })
    return payload


def print_results(run: RunInfo, results: list[BenchmarkScore],
                  errors: dict[str, dict[str, int]] | None = None) -> None:
    """The scores, and what the ``failed`` column counts: requests that failed (``errors``, by benchmark), answers
    the jury gave no valid rating, answers that could not be scored otherwise."""
    emit_table(f"run {run.run_id} — {run.model} (prompt style: {run_prompt_style(run.manifest)})",
               ["benchmark", "metric", "score", "n", "failed"],
               [[r.benchmark, r.metric, r.score, r.n, r.n_failed] for r in results])
    errors = errors or {}
    requests = unjudged = unscored = 0
    for r in results:
        sent_failed = min(r.n_failed, sum(errors.get(r.benchmark, {}).values()))
        requests += sent_failed
        if r.metric == JURY:
            unjudged += r.n_failed - sent_failed
        else:
            unscored += r.n_failed - sent_failed
    if requests:
        info(f"{requests} request(s) failed after retries; they are recorded and excluded from the scores")
    if unjudged:
        info(f"{unjudged} answer(s) got no valid jury rating; they are excluded from the scores: `medhelm-local jury "
             f"failures` says why, `medhelm-local jury rescore --run {run.run_id}` asks the judges again")
    if unscored:
        info(f"{unscored} answer(s) could not be scored; they are excluded from the scores")


def configured_reply_model(app_ctx: AppContext, model: str) -> str | None:
    """The ``reply_model`` of ``model`` in appliance.yaml; None where it has none or is no longer configured."""
    return next((m.reply_model for m in app_ctx.home.config.models if m.name == model), None)


def print_outcome(outcome: RunOutcome, reply_model: str | None = None) -> None:
    """``reply_model``: the name the run's model is configured to reply with, if any (what a mismatch was against)."""
    if outcome.results:
        print_results(outcome.run, outcome.results, outcome.errors)
    report = outcome.report
    if report is not None:
        info(f"session {report.session_id}: sent {report.sent} ({report.ok} ok, {report.errors} failed) in "
             f"{duration(report.wall_s)}s, peak concurrency {report.peak_concurrency}, "
             f"{report.prompt_tokens} prompt + {report.completion_tokens} completion tokens")
    for benchmark, categories in outcome.errors.items():
        detail = ", ".join(f"{c}: {n}" for c, n in categories.items())
        info(f"{benchmark}: recorded failures ({detail}); "
             f"{send_again_hint(outcome.run.run_id, '--retry-errors', quoted=True)} re-sends only those")
    context = (outcome.run.manifest or {}).get("context") or {}
    if report is not None and context.get("source") == "default":  # said once per command that sent something
        model = outcome.run.model
        info(f"{model}: its context length is not set in appliance.yaml and its server does not report it, so "
             f"prompts were fitted to {context.get('context_length')} tokens (a longer one is cut); set "
             f"context_length on the model if it takes more (`medhelm-local models update {model} "
             "--context-length N`)")
    # What each category means and what to do first: re-sending before the cause is fixed fails the same way.
    for category in sorted({c for categories in outcome.errors.values() for c in categories} - {MODEL_MISMATCH}):
        hint = failure_hint(category, who="model")
        if hint != UNKNOWN_HINT:
            info(f"{category}: {hint}")
    if any(MODEL_MISMATCH in categories for categories in outcome.errors.values()) and reply_model is not None:
        info(f"{MODEL_MISMATCH}: the server's reply named another model than reply_model ({reply_model!r}, set on "
             f"model {outcome.run.model!r} in appliance.yaml); those answers are not scored. If the server names its "
             "model otherwise, correct reply_model, or remove it where the server names the model asked for (the "
             "server's own name for it is never logged: it may echo a prompt; its /v1/models lists it); else a "
             "router or proxy in front of it sends requests elsewhere")
    elif any(MODEL_MISMATCH in categories for categories in outcome.errors.values()):
        info(f"{MODEL_MISMATCH}: the server's reply named another model than the one asked for (a router or proxy "
             "in front of it sending requests elsewhere?); those answers are not scored. If the server names the "
             "same model otherwise (one that names the model it loaded, a gateway that adds a version), set "
             "reply_model: NAME on the model in appliance.yaml (the server's own name for it is never logged: it may "
             "echo a prompt; its /v1/models lists it)")
    if outcome.run.status == "inferred":
        scores_it = send_again_hint(outcome.run.run_id, quoted=True)
        info(f"run {outcome.run.run_id}: inference done, not scored; {scores_it} scores it")
    if outcome.shard is not None and not outcome.complete:
        info(f"shard {outcome.shard} merged {merged_text(outcome)} into run {outcome.run.run_id}; the run "
             "finishes when its last shard merges")


def merged_text(outcome: RunOutcome) -> str:
    """``N outcome(s)``: those the merge added; those the run already had (a merge repeated) are said apart."""
    present = f" ({outcome.already_present} already in the run)" if outcome.already_present else ""
    return f"{outcome.merged} outcome(s){present}"


def run(
    ctx: typer.Context,
    model: str | None = typer.Option(None, "--model", help="Configured model name (see `models list`)."),
    benchmarks: str | None = typer.Option(None, "--benchmarks", help="Comma-separated benchmark ids (on resume "
                                          "or retry, the run's own: another is refused)."),
    max_instances: int | None = typer.Option(None, "--max-instances", min=1,
                                             help="Stratified deterministic sample size per benchmark (on resume or "
                                                  "retry, the run's own: another is refused)."),
    seed: int | None = typer.Option(None, "--seed", help="Sampling and decoding seed (on resume or retry, the run's "
                                    "own: another is refused) [default: config]."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1,
                                           help="Cap on requests in flight (adaptive below it) [default: on resume "
                                                "or retry, the run's own; else config; 2 for the embedded model, "
                                                "which answers one at a time]."),
    initial_concurrency: int | None = typer.Option(
        None, "--initial-concurrency", min=1,
        help="Requests in flight at the start; the limiter adapts from there [default: on resume or retry, the "
             "run's own; else the cap for vllm models, which batch up to it; half the cap for other servers]."),
    resume: str | None = typer.Option(None, "--resume", help="Resume this run: send only what is missing."),
    retry_errors: str | None = typer.Option(None, "--retry-errors", help="Re-send only the failed requests of "
                                            "this run; each new outcome replaces the error atomically. A run "
                                            "with items never sent is refused: --resume sends them first."),
    run_id: str | None = typer.Option(None, "--run-id", help="Run id to create or resume (all shards share it)."),
    shard: str | None = typer.Option(None, "--shard", help="I/N: run slice I of N (Kubernetes Indexed Job); "
                                     "shards merge into one run."),
    new_run: bool = typer.Option(False, "--new-run", help="Start a new run even if an unfinished one has the "
                                 "same plan (default: resume it)."),
    order: str | None = typer.Option(None, "--order", help=f"Send order: {', '.join(ORDER_MODES)} (prefix groups "
                                     "requests sharing a prefix, for the server's prefix cache) [default: prefix; "
                                     "on resume: the run's own]."),
    prompt_style: str | None = typer.Option(None, "--prompt-style", help="Prompts and decoding: 'default' (this "
                                            "appliance's) or 'medhelm' (MedHELM's, byte for byte, to compare "
                                            "with its public leaderboard; see benchmarks/PARITY.md) "
                                            "[default: default; on resume: the run's own]."),
    request_timeout: float | None = typer.Option(None, "--request-timeout", min=0.1,
                                                 help="Seconds per request attempt [default: on resume or retry, "
                                                      "the run's own; else the model's timeout_s]."),
    max_retries: int | None = typer.Option(None, "--max-retries", min=0, max=20,
                                           help="Retries per request [default: on resume or retry, the run's "
                                                "own; else config]."),
    skip_scoring: bool = typer.Option(False, "--skip-scoring", help="Only run inference (the run ends 'inferred'); "
                                      "score it later with `run --resume RUN_ID`."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Evaluate MODEL on BENCHMARKS and score the results."""
    app_ctx = app_context(ctx)
    request = EvaluationRequest(
        selection=Selection(model=model, benchmarks=parse_benchmarks(benchmarks) if benchmarks is not None else None,
                            max_instances=max_instances, seed=seed, order=order,
                            prompt_style=check_style(prompt_style) if prompt_style is not None else None),
        sending=Sending(concurrency=concurrency, initial_concurrency=initial_concurrency,
                        request_timeout_s=request_timeout, max_retries=max_retries,
                        show_progress=not as_json),
        mode=Mode.from_flags(resume=resume, retry_errors=retry_errors, run_id=run_id,
                             shard=parse_shard(shard) if shard else None, new_run=new_run),
        score=not skip_scoring,
    )
    outcome = evaluate(app_ctx, request)
    if as_json:
        emit_json(outcome_payload(outcome))
    else:
        print_outcome(outcome, configured_reply_model(app_ctx, outcome.run.model))
    report = outcome.report
    if report is not None and report.sent and not report.ok:
        # Recorded, and resumable with --retry-errors; but a run that got no answer at all is no success (a
        # scheduled run's Job must not be marked succeeded).
        info(f"run {outcome.run.run_id}: every one of the {report.sent} request(s) sent failed")
        raise typer.Exit(1)
