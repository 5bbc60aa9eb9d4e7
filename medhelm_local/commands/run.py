"""``run``: evaluate a model on benchmarks; every response is committed as it arrives."""

from __future__ import annotations

import asyncio

import typer

from medhelm_local.analysis.aggregate import benchmark_score
from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.errors import BadInputError
from medhelm_local.inference.backends import open_client
from medhelm_local.records import BenchmarkScore
from medhelm_local.runner.execute import execute_run
from medhelm_local.runner.plan import plan_run
from medhelm_local.runner.progress import RunProgress
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.store import Store
from medhelm_local.store.store import RunInfo


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def parse_benchmarks(value: str) -> list[str]:
    names = [b.strip() for b in value.split(",") if b.strip()]
    if not names:
        raise BadInputError("--benchmarks: expected a comma-separated list of benchmark ids")
    return names


def run_evaluation(app_ctx: AppContext, model: str, benchmarks: list[str], *, max_instances: int | None,
                   seed: int | None, concurrency: int | None, show_progress: bool = True) -> tuple[RunInfo,
                                                                                                  list[BenchmarkScore]]:
    """Plan, execute, score. Shared by ``run`` and ``demo``."""
    home = app_ctx.home
    config = home.config
    endpoint = config.model(model)
    seed = config.runner.seed if seed is None else seed
    concurrency = min(concurrency or config.runner.max_concurrency, config.runner.max_concurrency)
    with Store.open(home) as store:
        run = plan_run(store, endpoint, benchmarks, max_instances=max_instances, seed=seed)
        audit_event(home, app_ctx.actor, "run.start", role="informatics", run_id=run.run_id, model=model,
                    endpoints=endpoint.base_urls or ["embedded:127.0.0.1"], datasets=run.manifest["datasets"])
        store.set_run_status(run.run_id, "running")
        try:
            with RunProgress(run.run_id, enabled=show_progress) as progress:
                asyncio.run(_execute(app_ctx, store, run, endpoint.name, concurrency, progress))
            results = []
            for benchmark in benchmarks:
                score_benchmark(store, run.run_id, benchmark, config=config)
                results.append(benchmark_score(store, run.run_id, model, benchmark))
        except BaseException as exc:
            store.set_run_status(run.run_id, "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
            audit_event(home, app_ctx.actor, "run.finish", outcome="failure", role="informatics",
                        run_id=run.run_id, error_type=type(exc).__name__)
            raise
        store.set_run_status(run.run_id, "finished", finished=True)
        failed = sum(r.n_failed for r in results)
        audit_event(home, app_ctx.actor, "run.finish", role="informatics", run_id=run.run_id, model=model,
                    scored=sum(r.n for r in results), failed=failed)
        finished = store.get_run(run.run_id)
        assert finished is not None
        return finished, results


async def _execute(app_ctx: AppContext, store: Store, run: RunInfo, model: str, concurrency: int,
                   progress: RunProgress) -> None:
    config = app_ctx.home.config
    async with open_client(config, config.model(model), max_connections=concurrency) as client:
        await execute_run(store, client, run, concurrency=concurrency, max_retries=config.runner.max_retries,
                          progress=progress)


def results_payload(run: RunInfo, results: list[BenchmarkScore]) -> dict[str, object]:
    return {
        "run_id": run.run_id, "model": run.model, "status": run.status,
        "results": [r.model_dump() for r in results],
    }


def print_results(run: RunInfo, results: list[BenchmarkScore]) -> None:
    emit_table(f"run {run.run_id} — {run.model}", ["benchmark", "metric", "score", "n", "failed"],
               [[r.benchmark, r.metric, r.score, r.n, r.n_failed] for r in results])
    failed = sum(r.n_failed for r in results)
    if failed:
        info(f"{failed} request(s) failed after retries; they are recorded and excluded from the scores")


def run(
    ctx: typer.Context,
    model: str = typer.Option(..., "--model", help="Configured model name (see `models list`)."),
    benchmarks: str = typer.Option(..., "--benchmarks", help="Comma-separated benchmark ids."),
    max_instances: int | None = typer.Option(None, "--max-instances", min=1,
                                             help="Stratified deterministic sample size per benchmark."),
    seed: int | None = typer.Option(None, "--seed", help="Sampling and decoding seed [default: config]."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Max requests in flight."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Evaluate MODEL on BENCHMARKS and score the results."""
    app_ctx = app_context(ctx)
    run_info, results = run_evaluation(app_ctx, model, parse_benchmarks(benchmarks), max_instances=max_instances,
                                       seed=seed, concurrency=concurrency, show_progress=not as_json)
    if as_json:
        emit_json(results_payload(run_info, results))
    else:
        print_results(run_info, results)
