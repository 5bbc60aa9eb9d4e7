"""``jury``: the LLM jury's failure report, re-scoring, and validation against clinician ratings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from medhelm_local.analysis.agreement import (
    instance_key,
    ratings_from_records,
    read_clinician_ratings,
    restrict,
    validate_jury,
)
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES
from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.deployment import as_job, refuse_without_model_egress
from medhelm_local.errors import BadInputError, NotFoundError
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.scoring.jury import JuryStats, is_jury_scored, jury_rows
from medhelm_local.scoring.jury_hints import failure_hint
from medhelm_local.scoring.registry import networked_judges
from medhelm_local.scoring.rouge import ROUGE_L
from medhelm_local.store.judgments import JudgmentStatus, get_judgments, judge_failure_rates, score_rows
from medhelm_local.store.ratings import list_ratings

NAME = "jury"
HELP = "The LLM jury: failure rates, re-scoring, validation against clinicians."
app = typer.Typer(no_args_is_help=True)


@app.command("failures")
def failures(
    ctx: typer.Context,
    run_id: str | None = typer.Option(None, "--run", help="Only this run (default: every run)."),
    benchmark: str | None = typer.Option(None, "--benchmark", help="Only this benchmark."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable."),
) -> None:
    """Failed and invalid judgements per judge and benchmark (they are never replaced by a score), each failure
    category with a hint of what it means; `jury rescore` asks again once the cause is fixed."""
    app_ctx = app_context(ctx)
    if benchmark is not None:
        app_ctx.specs.get(benchmark)  # an unknown id is bad input, not an empty table
    with app_ctx.open_store() as store:
        if run_id is not None and store.get_run(run_id) is None:
            raise NotFoundError(f"no run {run_id!r} in the store")
        rates = judge_failure_rates(store, run_id, benchmark)
    payload = [{"judge": r.judge, "benchmark": r.benchmark, "total": r.total, "ok": r.ok,
                "request_failed": r.request_failed, "invalid_reply": r.invalid_reply,
                "failure_rate": r.failure_rate, "structured_output": r.output_shapes, "truncated": r.truncated,
                "categories": [{"category": c, "count": n, "hint": failure_hint(c)} for c, n in r.categories.items()]}
               for r in rates]
    if as_json:
        emit_json(payload)
        return
    emit_table("jury failures", ["judge", "benchmark", "structured output", "total", "ok", "request failed",
                                 "invalid reply", "rate", "prompts cut to fit"],
               [[r.judge, r.benchmark, ", ".join(r.output_shapes) or "-", r.total, r.ok, r.request_failed,
                 r.invalid_reply, r.failure_rate, r.truncated] for r in rates])
    causes = [[r.judge, r.benchmark, category, count, failure_hint(category)] for r in rates
              for category, count in r.categories.items()]
    if causes:
        emit_table("why (failure category per judge)", ["judge", "benchmark", "category", "count", "hint"], causes)


@app.command("rescore")
def rescore(
    ctx: typer.Context,
    run_id: str = typer.Option(..., "--run", help="Run id."),
    benchmark: str | None = typer.Option(None, "--benchmark", help="Only this benchmark (default: the run's "
                                         "jury-scored benchmarks)."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, max=64,
                                           help="Judge requests in flight per judge."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable."),
) -> None:
    """Ask the judges again only where a judgement failed or is missing; every valid judgement is kept."""
    app_ctx = app_context(ctx)
    config = app_ctx.home.config
    with app_ctx.open_store() as store:
        run = store.get_run(run_id)
        if run is None:
            raise NotFoundError(f"no run {run_id!r} in the store")
        specs = app_ctx.specs
        targets = [benchmark] if benchmark else [b for b in run.benchmarks if is_jury_scored(specs.get(b))]
        for target in targets:
            if target not in run.benchmarks:
                raise BadInputError(f"run {run_id} did not evaluate {target}")
            if not is_jury_scored(specs.get(target)):
                raise BadInputError(f"benchmark {target} is not scored by the jury (metric {specs.get(target).metric})")
        judges = networked_judges(config, [specs.get(target) for target in targets])
        if judges:
            refuse_without_model_egress(
                f"jury rescore asks the judges ({', '.join(judges)})",
                as_job("jury", "rescore", "--run", run_id, *(["--benchmark", benchmark] if benchmark else []),
                       "--json"))
        results: list[dict[str, Any]] = []
        for target in targets:
            stats = JuryStats()
            scores = score_benchmark(store, specs, run_id, target, config=config, jury_concurrency=concurrency,
                                     only_failed=True, jury_stats=stats, egress=app_ctx.egress)
            main = jury_rows(scores)
            results.append({"benchmark": target, "reasked": stats.asked, "kept": stats.kept,
                            "scored": sum(s.value is not None for s in main),
                            "failed": sum(s.value is None for s in main),
                            "structured_output": {j: o.shape.value for j, o in sorted(stats.shapes.items())}})
    audit_event(app_ctx.home, app_ctx.actor, "jury.rescore", role="informatics", run_id=run_id,
                benchmarks=targets, reasked=sum(int(r["reasked"]) for r in results))
    if as_json:
        emit_json(results)
    else:
        emit_table(f"jury rescore {run_id}", ["benchmark", "re-asked", "kept", "scored", "failed"],
                   [[r["benchmark"], r["reasked"], r["kept"], r["scored"], r["failed"]] for r in results])


@app.command("validate")
def validate(
    ctx: typer.Context,
    ratings: Path | None = typer.Option(None, "--ratings", help="CSV: instance_id, rater, and the rubric's "
                                        "criteria (or one 'score' column), ratings 1-5; with several benchmarks, a "
                                        "'benchmark' column too [default: the ratings clinicians gave in the web "
                                        "console, stored for this run]."),
    run_id: str = typer.Option(..., "--run", help="The run whose jury ratings and outputs were rated."),
    benchmarks: list[str] = typer.Option(..., "--benchmark", help="Jury-scored benchmark id; repeat to pool "
                                         "several (reported combined and per benchmark)."),
    resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples", min=0, max=100_000,
                                  help="Bootstrap resamples for the 95% CIs."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable."),
) -> None:
    """Agreement of the jury (and of ROUGE-L) with clinician ratings: ICC(3,k) after per-rater z-scoring, and
    the average clinician-clinician ICC, with bootstrap 95% CIs (MedHELM Table 2)."""
    app_ctx = app_context(ctx)
    names = list(dict.fromkeys(benchmarks))
    specs = [app_ctx.specs.get(b) for b in names]
    for spec in specs:
        if not is_jury_scored(spec):
            raise BadInputError(f"benchmark {spec.id} is not scored by the jury (metric {spec.metric})")
    combined = len(specs) > 1
    clinicians = read_clinician_ratings(ratings, specs) if ratings is not None else None
    source = str(ratings) if ratings is not None else "the console's stored ratings"
    jury: dict[str, dict[str, float]] = {}
    rouge: dict[str, float] = {}
    known: set[str] = set()
    with app_ctx.open_store() as store:
        run = store.get_run(run_id)
        if run is None:
            raise NotFoundError(f"no run {run_id!r} in the store")
        for name in names:
            if name not in run.benchmarks:
                raise BadInputError(f"run {run_id} did not evaluate {name}")
            for j in get_judgments(store, run_id, name):
                if j.status == JudgmentStatus.OK and j.ratings:
                    key = instance_key(name, j.instance_id, combined=combined)
                    jury.setdefault(j.judge, {})[key] = sum(j.ratings.values()) / len(j.ratings)
            for iid, _, value, _ in score_rows(store, run_id, name, ROUGE_L):
                if value is not None:
                    rouge[instance_key(name, iid, combined=combined)] = value
            known |= {instance_key(name, iid, combined=combined)
                      for iid, _ in store.run_item_fingerprints(run_id, name)}
        if clinicians is None:
            stored = list_ratings(store, run_id, names)
            if not stored:
                raise BadInputError(f"no clinician ratings are stored for run {run_id} on {', '.join(names)}: "
                                    "have clinicians rate in the web console (`serve console`), or give --ratings")
            clinicians = ratings_from_records([(r.benchmark, r.instance_id, r.rater, r.ratings) for r in stored],
                                              combined=combined)
    rated = {i for r in clinicians.composites.values() for i in r}
    unknown = rated - known
    if unknown:
        raise BadInputError(f"{source}: {len(unknown)} rated instance(s) are not items of run {run_id} "
                            f"for {', '.join(names)} (column 'instance_id')")
    if not jury:
        raise BadInputError(f"run {run_id} has no valid jury judgements for {', '.join(names)}; run the jury first")
    label = "combined" if combined else names[0]
    result = validate_jury(label, run_id, clinicians, jury, rouge, resamples=resamples, seed=seed)
    per_benchmark = []
    if combined:
        for name in names:
            prefix = f"{name}/"
            part = restrict(clinicians, prefix)
            if not part.composites:
                continue
            per_benchmark.append(validate_jury(
                name, run_id, part, {j: {k: v for k, v in r.items() if k.startswith(prefix)} for j, r in jury.items()},
                {k: v for k, v in rouge.items() if k.startswith(prefix)}, resamples=resamples, seed=seed))
    audit_event(app_ctx.home, app_ctx.actor, "jury.validate", role="informatics", run_id=run_id,
                benchmarks=names, instances=result.n_instances, clinicians=result.n_clinicians,
                ratings_source="file" if ratings is not None else "console")
    if as_json:
        payload = result.model_dump()
        if combined:
            payload["per_benchmark"] = [r.model_dump() for r in per_benchmark]
        emit_json(payload)
        return
    rows = []
    for r in [result, *per_benchmark]:
        rows += [[r.benchmark, name, a.icc, a.ci_low, a.ci_high, a.n] for name, a in (
            ("LLM jury vs clinicians", r.jury), ("ROUGE-L vs clinicians", r.rouge_l),
            ("clinician vs clinician (mean over pairs)", r.clinician_clinician))]
    emit_table("jury validation (ICC(3,k) after per-rater z-scoring, bootstrap 95% CI)",
               ["benchmark", "comparison", "icc", "ci low", "ci high", "n"], rows)
    for rater, why in result.excluded_raters.items():
        info(f"excluded rater {rater}: {why}")
