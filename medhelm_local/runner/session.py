"""One ``run`` invocation: pick (or plan) the run, check the model server, send, score, audit.

* A new run is planned, its manifest built (server versions and served models are asked for first) and both
  are stored before any request is sent.
* The same command after a crash finds the unfinished run with the same plan key and resumes it; so does
  ``--resume RUN_ID``. ``--retry-errors RUN_ID`` re-sends only the items whose outcome is an error.
* A run resumes only against the same model identity (served model, weights hash, server version): mixing
  outputs of two models in one run is refused.
* A run is frozen to the specs it was created with (snapshotted in its manifest): resuming or retrying it after
  a benchmark's spec changed is refused (exit 2), naming the benchmark and the changed fields.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medhelm_local.analysis.aggregate import benchmark_score
from medhelm_local.audit import audit_event
from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.context import AppContext
from medhelm_local.errors import BadInputError, NotFoundError
from medhelm_local.home.config import ApplianceConfig, ModelEndpoint
from medhelm_local.inference.backends import describe_servers, open_client
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.tokens import TokenCounter, open_counter
from medhelm_local.logs import get_logger
from medhelm_local.prompts.styles import (
    DEFAULT_STYLE,
    manifest_entry,
    manifest_specs,
    run_prompt_style,
    spec_changes,
    styled_spec,
)
from medhelm_local.records import BenchmarkScore
from medhelm_local.runner import shard as sharding
from medhelm_local.runner.execute import ExecutionReport, ExecutionSettings, execute_run
from medhelm_local.runner.fitting import PromptFitter, context_entry, run_context_length
from medhelm_local.runner.manifest import build_manifest, manifest_sha256, model_identity, weights_fingerprint
from medhelm_local.runner.plan import (
    Plan,
    compute_plan,
    derived_run_id,
    new_run_id,
    plan_items,
    shard_range,
    validate_benchmarks,
)
from medhelm_local.runner.progress import RunProgress
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.scoring.jury import require_judges
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.runlock import run_lock
from medhelm_local.store.store import RunInfo, utcnow

log = get_logger(__name__)
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass
class RunOptions:
    model: str | None = None
    benchmarks: list[str] | None = None
    max_instances: int | None = None
    seed: int | None = None
    concurrency: int | None = None
    initial_concurrency: int | None = None
    order: str = "prefix"
    prompt_style: str | None = None  # None: the default style for a new run, the run's own on resume
    resume: str | None = None
    retry_errors: str | None = None
    run_id: str | None = None
    shard: tuple[int, int] | None = None
    new_run: bool = False
    request_timeout_s: float | None = None
    max_retries: int | None = None
    backoff_base_s: float = 0.5
    score: bool = True
    show_progress: bool = True


@dataclass
class RunOutcome:
    run: RunInfo
    mode: str  # new | resume | retry_errors | shard
    results: list[BenchmarkScore] = field(default_factory=list)
    report: ExecutionReport | None = None
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    complete: bool = True
    shard: str | None = None
    merged: int | None = None


@dataclass
class _Target:
    endpoint: ModelEndpoint
    mode: str
    run: RunInfo | None = None
    plan: Plan | None = None
    run_id: str | None = None
    seed: int = 0


def _check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise BadInputError("--run-id: letters, digits, '.', '_' and '-' only (at most 128)")
    return run_id


def _check_style_of(run: RunInfo, options: RunOptions) -> None:
    style = run_prompt_style(run.manifest)
    if options.prompt_style and options.prompt_style != style:
        raise BadInputError(f"--prompt-style: run {run.run_id} was planned with prompt style {style!r}, not "
                            f"{options.prompt_style!r}; a run never mixes styles (start a new run)")


def _check_specs_frozen(run: RunInfo) -> None:
    """Refuse to add to a run whose benchmarks' spec files changed since it was created: one run never mixes
    prompts or decoding. (The run itself always uses its snapshot; this says why it cannot go on.)"""
    changed = {b: fields for b in run.benchmarks if (fields := spec_changes(b, run.manifest))}
    if changed:
        detail = "; ".join(f"benchmark {b}: {', '.join(fields[:6])}{' ...' if len(fields) > 6 else ''}"
                           for b, fields in changed.items())
        raise BadInputError(
            f"run {run.run_id} is frozen to the specs it was created with, and the spec changed since ({detail}); "
            "a run never mixes prompts or decoding: start a new run (--new-run), or restore the spec"
        )


def _require_plan_args(options: RunOptions) -> tuple[str, list[str]]:
    if not options.model or not options.benchmarks:
        raise BadInputError("--model and --benchmarks are required unless --resume or --retry-errors names a run")
    return options.model, options.benchmarks


def _resolve(store: Store, config: ApplianceConfig, options: RunOptions) -> _Target:
    if options.resume and options.retry_errors:
        raise BadInputError("--resume and --retry-errors: give one of them")
    existing_id = options.resume or options.retry_errors
    if existing_id:
        run = store.get_run(existing_id)
        if run is None:
            raise NotFoundError(f"run {existing_id!r} not found; see `medhelm-local runs list`")
        if options.model and options.model != run.model:
            raise BadInputError(f"--model: run {existing_id} evaluates {run.model!r}, not {options.model!r}")
        _check_style_of(run, options)
        _check_specs_frozen(run)
        return _Target(endpoint=config.model(run.model), mode="resume" if options.resume else "retry_errors",
                       run=run, run_id=run.run_id, seed=run.seed)
    model, benchmarks = _require_plan_args(options)
    endpoint = config.model(model)
    seed = config.runner.seed if options.seed is None else options.seed
    plan = compute_plan(store, model, benchmarks, max_instances=options.max_instances, seed=seed,
                        order_mode=options.order, prompt_style=options.prompt_style or DEFAULT_STYLE)
    run_id = _check_run_id(options.run_id) if options.run_id else None
    if run_id is None and not options.new_run:
        run_id = runs_db.find_resumable(store, plan.plan_key)
    if run_id is not None:
        run = store.get_run(run_id)
        if run is not None:
            meta = runs_db.runner_run(store, run_id)
            if meta is None or meta[0] != plan.plan_key:
                raise BadInputError(f"--run-id: run {run_id} exists with a different plan (model, benchmarks, "
                                    "seed, sample size, order, prompt style or dataset versions)")
            _check_specs_frozen(run)
            return _Target(endpoint=endpoint, mode="resume", run=run, run_id=run_id, seed=seed)
    return _Target(endpoint=endpoint, mode="new", plan=plan, run_id=run_id or new_run_id(), seed=seed)


def _check_served_model(endpoint: ModelEndpoint, servers: list[dict[str, Any]]) -> None:
    """Warn (not fail: some servers list aliases or file names) when a replica does not list the model id."""
    for server in servers:
        models = server.get("models") or []
        server["lists_model"] = not models or endpoint.model_id in models
        if not server["lists_model"]:
            log.warning("model.not_listed", model=endpoint.name, url=server["url"], served_models=models)


def _identity_now(endpoint: ModelEndpoint, servers: list[dict[str, Any]], weights: dict[str, Any] | None
                  ) -> dict[str, Any]:
    return model_identity({"model": {"served_model": endpoint.model_id, "weights": weights, "servers": servers}})


def _check_identity(run: RunInfo, now: dict[str, Any]) -> None:
    before = model_identity(run.manifest)
    changed = [k for k in before if before[k] is not None and now[k] is not None and before[k] != now[k]
               and before[k] != []]
    if changed:
        raise BadInputError(
            f"run {run.run_id} was started against a different model ({', '.join(changed)} changed: "
            f"{ {k: before[k] for k in changed} } -> { {k: now[k] for k in changed} }); it cannot be resumed "
            "with this one. Start a new run (--new-run)"
        )


def _settings(config: ApplianceConfig, options: RunOptions, *, errors_only: bool) -> ExecutionSettings:
    ceiling = config.runner.max_concurrency
    cap = min(options.concurrency or ceiling, ceiling)
    if options.concurrency and options.concurrency > ceiling:  # say so: a silent cap looks like a slow server
        log.warning("run.concurrency_capped", requested=options.concurrency, ceiling=ceiling,
                    setting="runner.max_concurrency")
    return ExecutionSettings(
        concurrency=cap, max_retries=config.runner.max_retries if options.max_retries is None else options.max_retries,
        initial_concurrency=options.initial_concurrency, backoff_base_s=options.backoff_base_s,
        errors_only=errors_only,
    )


def _new_run(store: Store, app_ctx: AppContext, target: _Target, options: RunOptions, servers: list[dict[str, Any]],
             weights: dict[str, Any] | None, counter: TokenCounter, *, shards: int | None = None) -> RunInfo:
    assert target.plan is not None and target.run_id is not None
    plan = target.plan
    config = app_ctx.home.config
    specs = {b: styled_spec(get_spec(b), plan.prompt_style) for b in plan.benchmarks}
    decoding: dict[str, Any] = {"temperature": 0.0, "seed": target.seed,
                                "max_tokens": {b: s.max_tokens for b, s in specs.items()}}
    if any(s.stop for s in specs.values()):
        decoding["stop"] = {b: s.stop for b, s in specs.items()}
    manifest = build_manifest(config=config, endpoint=target.endpoint, servers=servers, weights=weights,
                              datasets=plan.datasets, seed=target.seed, max_instances=options.max_instances,
                              order_mode=plan.order_mode, decoding=decoding,
                              prompt_style=manifest_entry(plan.prompt_style, plan.benchmarks),
                              specs=manifest_specs(specs), context=context_entry(target.endpoint, counter))
    if manifest["context"]["source"] == "default":
        log.warning("run.context_length_default", model=target.endpoint.name,
                    context_length=manifest["context"]["context_length"], setting="context_length")
    run = RunInfo(run_id=target.run_id, model=target.endpoint.name, benchmarks=plan.benchmarks, created_at=utcnow(),
                  finished_at=None, status="planned", max_instances=options.max_instances, seed=target.seed,
                  manifest=manifest)
    digest = manifest_sha256(manifest)
    audit_event(app_ctx.home, app_ctx.actor, "run.start", role="informatics", run_id=run.run_id, model=run.model,
                endpoints=[s["url"] for s in servers], datasets=plan.datasets, manifest_sha256=digest,
                shards=shards)
    runs_db.insert_plan(store, run, plan_items(store, plan), plan_key=plan.plan_key, order_mode=plan.order_mode,
                        manifest_sha256=digest)
    store.reopen()  # the send phase needs none of what planning left cached (100k items: about 80 MB)
    return run


async def _prepare_client(store: Store, client: ChatClient, endpoint: ModelEndpoint
                          ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    store.release()  # never hold the store's lock across network waits; the next query takes it back
    servers = await describe_servers(client, endpoint)
    _check_served_model(endpoint, servers)
    weights = weights_fingerprint(store, endpoint.weights_path) if endpoint.weights_path else None
    return servers, weights


async def _token_counter(client: ChatClient, endpoint: ModelEndpoint) -> TokenCounter:
    """How the model's server counts tokens (its tokenize endpoint, else the estimate)."""
    return await open_counter(client, endpoint.kind, context_length=endpoint.context_tokens)


def _fitter(run: RunInfo, counter: TokenCounter, settings: ExecutionSettings) -> PromptFitter | None:
    """Fits prompts into the context length the run was created with (runs from before fitting: none)."""
    length = run_context_length(run.manifest)
    if length is None:
        return None
    return PromptFitter(counter, length, max_retries=settings.max_retries, backoff_base_s=settings.backoff_base_s)


def _audit_endpoints(app_ctx: AppContext, run_id: str, session_id: str, servers: list[dict[str, Any]],
                     model_id: str) -> None:
    for server in servers:
        audit_event(app_ctx.home, app_ctx.actor, "endpoint.use", role="informatics", run_id=run_id,
                    session_id=session_id, url=server["url"], served_model=model_id,
                    server_version=server.get("version"))


async def _send(app_ctx: AppContext, store: Store, client: ChatClient, run: RunInfo, servers: list[dict[str, Any]],
                settings: ExecutionSettings, options: RunOptions, *, mode: str, shard: str | None,
                fitter: PromptFitter | None) -> ExecutionReport:
    session_id = uuid.uuid4().hex[:12]
    runs_db.start_session(store, run.run_id, session_id, mode=mode, shard=shard, endpoints=servers)
    _audit_endpoints(app_ctx, run.run_id, session_id, servers, client.model_id)
    with RunProgress(run.run_id, enabled=options.show_progress) as progress:
        return await execute_run(store, client, run, settings=settings, progress=progress, session_id=session_id,
                                 fitter=fitter)


def evaluate(app_ctx: AppContext, options: RunOptions) -> RunOutcome:
    """Run (or resume, or retry the errors of) an evaluation, then score it."""
    if options.prompt_style and options.benchmarks:  # a benchmark without parity is refused before anything else
        validate_benchmarks(options.benchmarks)
        for benchmark in options.benchmarks:
            styled_spec(get_spec(benchmark), options.prompt_style)
    # A jury-scored benchmark without judges would fail only after all inference: refuse it up front.
    require_judges(app_ctx.home.config, options.benchmarks or [])
    if options.shard is not None:
        return _evaluate_shard(app_ctx, options)
    home = app_ctx.home
    config = home.config
    with Store.open(home, audit=app_ctx.system_audit) as store:
        target = _resolve(store, config, options)
        settings = _settings(config, options, errors_only=target.mode == "retry_errors")

        async def infer() -> tuple[RunInfo, ExecutionReport]:
            async with open_client(config, target.endpoint, max_connections=settings.concurrency, egress=app_ctx.egress,
                                   timeout_s=options.request_timeout_s) as client:
                servers, weights = await _prepare_client(store, client, target.endpoint)
                counter = await _token_counter(client, target.endpoint)
                if target.run is None:
                    run = _new_run(store, app_ctx, target, options, servers, weights, counter)
                else:
                    run = target.run
                    _check_identity(run, _identity_now(target.endpoint, servers, weights))
                    audit_event(home, app_ctx.actor, "run.resume", role="informatics", run_id=run.run_id,
                                model=run.model, mode=target.mode)
                store.set_run_status(run.run_id, "running")
                started.append(run.run_id)
                report = await _send(app_ctx, store, client, run, servers, settings, options, mode=target.mode,
                                     shard=None, fitter=_fitter(run, counter, settings))
                return run, report

        started: list[str] = []  # the run whose status this invocation set: only that one is marked on failure

        try:
            with run_lock(home.store_path, str(target.run_id), config.store):
                run, report = asyncio.run(infer())
                outcome = _finish(app_ctx, store, run, options, mode=target.mode)
        except BaseException as exc:
            if started:
                store.set_run_status(started[0], "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
                audit_event(home, app_ctx.actor, "run.finish", outcome="failure", role="informatics",
                            run_id=started[0], error_type=type(exc).__name__)
            raise
        outcome.report = report
        return outcome


def _finish(app_ctx: AppContext, store: Store, run: RunInfo, options: RunOptions, *, mode: str,
            shard: str | None = None, merged: int | None = None) -> RunOutcome:
    config = app_ctx.home.config
    results = []
    if options.score:
        for benchmark in run.benchmarks:
            score_benchmark(store, run.run_id, benchmark, config=config, egress=app_ctx.egress)
            results.append(benchmark_score(store, run.run_id, run.model, benchmark))
    store.set_run_status(run.run_id, "finished" if options.score else "inferred", finished=True)
    errors = runs_db.errors_by_category(store, run.run_id)
    audit_event(app_ctx.home, app_ctx.actor, "run.finish", role="informatics", run_id=run.run_id, model=run.model,
                scored=sum(r.n for r in results), failed=sum(r.n_failed for r in results),
                errors=sum(sum(v.values()) for v in errors.values()))
    finished = store.get_run(run.run_id)
    assert finished is not None
    return RunOutcome(run=finished, mode=mode, results=results, errors=errors, shard=shard, merged=merged)


# -- shards -----------------------------------------------------------------------------------------------


def _evaluate_shard(app_ctx: AppContext, options: RunOptions) -> RunOutcome:
    assert options.shard is not None
    if options.resume or options.retry_errors or options.new_run:
        raise BadInputError("--shard: use --run-id (or nothing) to name the run, not --resume/--retry-errors/--new-run")
    index, count = options.shard
    shard_label = f"{index}/{count}"
    model, benchmarks = _require_plan_args(options)
    home = app_ctx.home
    config = home.config
    endpoint = config.model(model)
    seed = config.runner.seed if options.seed is None else options.seed
    settings = _settings(config, options, errors_only=False)

    async def infer() -> tuple[RunInfo, ExecutionReport, Path]:
        async with open_client(config, endpoint, max_connections=settings.concurrency, egress=app_ctx.egress,
                               timeout_s=options.request_timeout_s) as client:
            with sharding.open_main_store(home) as main:
                servers, weights = await _prepare_client(main, client, endpoint)
                counter = await _token_counter(client, endpoint)
                plan = compute_plan(main, model, benchmarks, max_instances=options.max_instances, seed=seed,
                                    order_mode=options.order, prompt_style=options.prompt_style or DEFAULT_STYLE)
                run_id = _check_run_id(options.run_id) if options.run_id else derived_run_id(plan.plan_key)
                run = main.get_run(run_id)
                if run is None:
                    target = _Target(endpoint=endpoint, mode="new", plan=plan, run_id=run_id, seed=seed)
                    run = _new_run(main, app_ctx, target, options, servers, weights, counter, shards=count)
                    main.set_run_status(run_id, "running")
                else:
                    meta = runs_db.runner_run(main, run_id)
                    if meta is None or meta[0] != plan.plan_key:
                        raise BadInputError(f"--run-id: run {run_id} exists with a different plan")
                    _check_specs_frozen(run)
                    _check_identity(run, _identity_now(endpoint, servers, weights))
                path = sharding.shard_store_path(home, run_id, index, count)
                resumed = path.exists()
                if not resumed:
                    done = sharding.answered_ids(main, run_id)
                    start, stop = shard_range(runs_db.count_items(main, run_id), index, count)
                    todo = [i for i in runs_db.items_in_rank_range(main, run_id, start, stop)
                            if (i.benchmark, i.instance_id) not in done]
                    sharding.build_shard_store(home, main, run, todo, path)
            if resumed:
                audit_event(home, app_ctx.actor, "run.resume", role="informatics", run_id=run.run_id,
                            model=run.model, mode="shard", shard=shard_label)
            with Store.open_file(home, path) as shard_store:
                report = await _send(app_ctx, shard_store, client, run, servers, settings, options, mode="shard",
                                     shard=shard_label, fitter=_fitter(run, counter, settings))
            return run, report, path

    try:
        run, report, path = asyncio.run(infer())
        with sharding.open_main_store(home) as main:
            merged = sharding.merge_shard(main, path, home, run.run_id)
            sharding.remove_shard_files(path)
            current = main.get_run(run.run_id)
            assert current is not None
            if sharding.unanswered(main, run.run_id) == 0 and current.status not in ("finished", "inferred"):
                outcome = _finish(app_ctx, main, current, options, mode="shard", shard=shard_label, merged=merged)
            else:
                outcome = RunOutcome(run=current, mode="shard", errors=runs_db.errors_by_category(main, run.run_id),
                                     complete=sharding.unanswered(main, run.run_id) == 0, shard=shard_label,
                                     merged=merged)
    except BaseException as exc:
        audit_event(home, app_ctx.actor, "run.finish", outcome="failure", role="informatics", shard=shard_label,
                    error_type=type(exc).__name__)
        raise
    outcome.report = report
    return outcome


def merge_run(app_ctx: AppContext, run_id: str, *, score: bool = True) -> RunOutcome:
    """``runs merge``: fold every shard file left for ``run_id`` into the main store; finish it if complete."""
    home = app_ctx.home
    with sharding.open_main_store(home) as main:
        run = main.get_run(run_id)
        if run is None:
            raise NotFoundError(f"run {run_id!r} not found; see `medhelm-local runs list`")
        merged = 0
        for path in sharding.pending_shard_files(home, run_id):
            merged += sharding.merge_shard(main, path, home, run_id)
            sharding.remove_shard_files(path)
        audit_event(home, app_ctx.actor, "run.merge", role="informatics", run_id=run_id, merged=merged)
        remaining = sharding.unanswered(main, run_id)
        if remaining == 0 and run.status not in ("finished", "inferred"):
            return _finish(app_ctx, main, run, RunOptions(score=score), mode="merge", merged=merged)
        current = main.get_run(run_id)
        assert current is not None
        return RunOutcome(run=current, mode="merge", errors=runs_db.errors_by_category(main, run_id),
                          complete=remaining == 0, merged=merged)
