"""``runs``: list and inspect runs, merge the shards of a sharded run, show manifests and costs."""

from __future__ import annotations

from typing import Any

import typer

from medhelm_local.analysis.cost import run_cost
from medhelm_local.application.evaluation import merge_shards
from medhelm_local.commands.run import configured_reply_model, merged_text, outcome_payload, print_outcome
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.deployment import send_again_hint
from medhelm_local.errors import NotFoundError
from medhelm_local.formatting import duration, money
from medhelm_local.prompts.styles import run_prompt_style
from medhelm_local.runner import shard as sharding
from medhelm_local.runner.liveness import run_live, status_text
from medhelm_local.runner.manifest import manifest_sha256
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.store import RunInfo

NAME = "runs"
HELP = "List and inspect runs; merge the shards of a sharded run."
app = typer.Typer(no_args_is_help=True)


def _summary(app_ctx: AppContext, store: Store, run: RunInfo) -> dict[str, Any]:
    planned = answered = errors = 0
    for benchmark in run.benchmarks:
        p, a, e = runs_db.item_counts(store, run.run_id, benchmark)
        planned, answered, errors = planned + p, answered + a, errors + e
    live = run_live(app_ctx.home, store, run)
    return {"run_id": run.run_id, "model": run.model, "benchmarks": run.benchmarks, "status": run.status,
            "live": live, "status_text": status_text(app_ctx.home, store, run, live),
            "prompt_style": run_prompt_style(run.manifest),
            "created_at": run.created_at, "finished_at": run.finished_at, "planned": planned, "answered": answered,
            "errors": errors, "manifest_sha256": manifest_sha256(run.manifest)}


def _get(store: Store, run_id: str) -> RunInfo:
    run = store.get_run(run_id)
    if run is None:
        raise NotFoundError(f"run {run_id!r} not found; see `medhelm-local runs list`")
    return run


@app.command("list")
def list_runs(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")
              ) -> None:
    """Every run: status, planned and answered items, recorded errors. A run left ``running`` by a process that
    was killed shows as interrupted (``--json``: status stays as stored, ``live`` false)."""
    app_ctx = app_context(ctx)
    with app_ctx.open_store(read_only=True) as store:
        rows = [_summary(app_ctx, store, r) for r in store.list_runs()]
    if as_json:
        emit_json(rows)
        return
    emit_table("runs", ["run", "model", "prompt style", "status", "planned", "answered", "errors", "created"],
               [[r["run_id"], r["model"], r["prompt_style"], r["status_text"], r["planned"], r["answered"], r["errors"],
                 r["created_at"]]
                for r in rows])


@app.command("show")
def show(ctx: typer.Context, run_id: str = typer.Argument(..., help="Run id."),
         as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """One run: progress, errors by category, sending options, sessions (time, tokens, endpoints, options) and
    cost."""
    app_ctx = app_context(ctx)
    with app_ctx.open_store(read_only=True) as store:
        run = _get(store, run_id)
        payload = _summary(app_ctx, store, run)
        payload["errors_by_category"] = runs_db.errors_by_category(store, run_id)
        payload["context"] = run.manifest.get("context")
        payload["sending"] = runs_db.run_sending(store, run_id)
        payload["datasets"] = _datasets(store, run)
        payload["truncated"] = runs_db.truncation_summary(store, run_id)
        payload["sessions"] = runs_db.sessions(store, run_id)
        payload["shard_files_pending"] = [p.name for p in sharding.pending_shard_files(app_ctx.home, run_id)]
        try:
            payload["cost"] = run_cost(store, run_id, app_ctx.home.config).model_dump()
        except NotFoundError:  # the model is no longer configured: no pricing to apply
            payload["cost"] = None
    if as_json:
        emit_json(payload)
        return
    emit_table(f"run {run_id}", ["field", "value"],
               [[k, payload["status_text" if k == "status" else k]]
                for k in ("model", "prompt_style", "status", "planned", "answered", "errors", "manifest_sha256")])
    for benchmark, categories in payload["errors_by_category"].items():
        info(f"{benchmark}: " + ", ".join(f"{c}: {n}" for c, n in categories.items()))
    for benchmark, dataset in payload["datasets"].items():
        if dataset["versions"]:
            info(f"{benchmark}: dataset version {', '.join(dataset['versions'])}"
                 + (", the current one" if dataset["current"] else
                    ", not the current one (another was registered since: new runs use that)"))
    if payload["sending"] is not None:
        info(f"sends with {_sending_text(payload['sending'])} (a resume or retry too, unless given again)")
    for benchmark, cut in payload["truncated"].items():
        info(f"{benchmark}: {cut['prompts']} prompt(s) truncated to fit the model's context (field {cut['field']}, "
             f"{cut['removed_tokens']} tokens removed in all, at most {cut['max_removed_tokens']} from one)")
    for session in payload["sessions"]:
        endpoints = ", ".join(f"{e.get('url')}" + (f" ({e['version']})" if e.get("version") else "")
                              for e in session["endpoints"] or [])
        info(f"session {session['session_id']} ({session['mode']}"
             + (f", shard {session['shard']}" if session["shard"] else "")
             + f"): {session['responses']} response(s), {session['errors']} error(s), wall "
             f"{duration(session['wall_s'])}s, {session['prompt_tokens']} prompt + {session['completion_tokens']} "
             f"completion tokens; endpoints: {endpoints or '-'}"
             + (f"; {_sending_text(session['sending'])}" if session["sending"] else ""))
    cost = payload["cost"]
    if cost is not None:
        info(f"tokens {cost['prompt_tokens']} in / {cost['completion_tokens']} out, wall {duration(cost['wall_s'])}s, "
             f"cost {money(cost['total'], unknown='unavailable')} ({cost['method']}: {cost['note']})")


def _datasets(store: Store, run: RunInfo) -> dict[str, dict[str, Any]]:
    """Per benchmark, the dataset versions the run planned its items from (as `datasets list` shows them) and
    whether they are the version registered last, the one new runs use (the leaderboard's "another dataset
    version"); None before the run planned any item."""
    out: dict[str, dict[str, Any]] = {}
    for benchmark in run.benchmarks:
        versions = store.run_dataset_versions(run.run_id, benchmark)
        registered = store.current_dataset(benchmark)
        current = None if not versions else registered is not None and versions == {registered.fingerprint}
        out[benchmark] = {"versions": sorted(v[:16] for v in versions), "current": current}
    return out


def _sending_text(sending: dict[str, Any]) -> str:
    initial = sending.get("initial_concurrency")
    return (f"--concurrency {sending.get('concurrency')}, --initial-concurrency "
            f"{'auto' if initial is None else initial}, --request-timeout "
            f"{sending.get('request_timeout_s')}s, --max-retries {sending.get('max_retries')}")


@app.command("manifest")
def manifest(ctx: typer.Context, run_id: str = typer.Argument(..., help="Run id."),
             as_json: bool = typer.Option(True, "--json", hidden=True,
                                          help="Accepted as every command that a script reads takes it: this one "
                                               "always writes JSON.")) -> None:
    """The run's reproducibility manifest (JSON) and its sha256."""
    with app_context(ctx).open_store(read_only=True) as store:
        run = _get(store, run_id)
    emit_json({"run_id": run_id, "manifest_sha256": manifest_sha256(run.manifest), "manifest": run.manifest})


@app.command("merge")
def merge(ctx: typer.Context, run_id: str = typer.Argument(..., help="Run id of a sharded run."),
          skip_scoring: bool = typer.Option(False, "--skip-scoring", help="Do not score even if complete."),
          as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Merge the shard stores left for RUN_ID into the main store; score and finish the run once complete. Refused
    (exit 2) while any shard of the run sends."""
    app_ctx = app_context(ctx)
    outcome = merge_shards(app_ctx, run_id, score=not skip_scoring)
    # The merge has given the run's lock back: whether a shard sends the run now is read as `runs show` reads it.
    with app_ctx.open_store(read_only=True) as store:
        live = run_live(app_ctx.home, store, outcome.run)
        shown = status_text(app_ctx.home, store, outcome.run, live)
    if as_json:
        emit_json({**outcome_payload(outcome), "live": live, "status_text": shown})
        return
    print_outcome(outcome, configured_reply_model(app_ctx, outcome.run.model))
    unanswered = ("" if outcome.complete or live is False else
                  " (items still unanswered: run the missing shards, or "
                  f"{send_again_hint(run_id, quoted=True)}, which sends them)")
    info(f"merged {merged_text(outcome)}; run {run_id} is {shown}{unanswered}")
