"""The steps of one evaluation session, in the order ``application.evaluation.evaluate`` drives them:

1. :func:`refuse_early`: a benchmark without parity for the prompt style, or that its scorers cannot score, is
   refused before anything else;
2. :func:`resolve`: which run (planned now, or an existing one) against which model: the ONE place the model is
   resolved (``--model`` for a new run or a shard, the run's own on resume or retry);
3. :func:`describe` / :func:`token_counter`: the model's servers (versions, served models), its weights' hash and
   how it counts tokens; :func:`check_identity`: a run resumes only against the same model identity (served
   model, weights hash, server version): mixing outputs of two models in one run is refused;
4. :func:`new_run` / :func:`record_plan`: a new run's manifest, then its plan in the store, before any request;
5. :func:`start_session` / :func:`send`: the send phase (``runner.execute``), with the sending options
   :func:`sending_for` resolved: those given, else the run's own (kept when it was created), else the defaults.

* A new run is planned, its manifest built (server versions and served models are asked for first) and both
  are stored before any request is sent.
* The same command after a crash finds the unfinished run with the same plan key and resumes it; so does
  ``--resume RUN_ID``. ``--retry-errors RUN_ID`` re-sends only the items whose outcome is an error.
* A run is frozen to the specs it was created with (snapshotted in its manifest): resuming or retrying it after
  a benchmark's spec changed is refused (exit 2), naming the benchmark and the changed fields.
* A run keeps the options it sends with (``SENT_WITH``: concurrency cap, initial concurrency, request timeout,
  retries): a resume or a retry of its errors sends with them, not with the defaults, unless an option is given
  again, which then becomes the run's (audited with ``run.resume``).

Nothing here writes audit records: the use case does, between the steps.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.errors import BadInputError, NotFoundError
from medhelm_local.home.config import ApplianceConfig, BackendKind, ModelEndpoint
from medhelm_local.inference.backends import describe_servers
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.embedded import smollm2_gguf_path
from medhelm_local.inference.tokens import TokenCounter, open_counter
from medhelm_local.logs import get_logger
from medhelm_local.phi_text import NAME_REASONS, chosen_name_problem
from medhelm_local.prompts.styles import (
    DEFAULT_STYLE,
    manifest_entry,
    manifest_specs,
    run_prompt_style,
    spec_changes,
    spec_for_run,
    styled_spec,
)
from medhelm_local.runner.execute import ExecutionReport, ExecutionSettings, execute_run, long_lived_objects_frozen
from medhelm_local.runner.fitting import PromptFitter, context_entry, run_context_length
from medhelm_local.runner.manifest import build_manifest, model_identity, weights_fingerprint
from medhelm_local.runner.options import Mode, ModeKind, Selection, Sending
from medhelm_local.runner.plan import (
    Plan,
    compute_plan,
    derived_run_id,
    is_generated_run_id,
    new_run_id,
    plan_items,
    validate_benchmarks,
)
from medhelm_local.runner.progress import RunProgress
from medhelm_local.scoring.checks import check_benchmarks
from medhelm_local.scoring.engine import ScoreAsAnswered
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store.store import RunInfo, utcnow

log = get_logger(__name__)
# A plan larger than this is followed by a reopen of the store, which hands back what planning left in DuckDB's
# cache; smaller plans leave little, and a reopen costs a new engine (loading the httpfs extension: about 0.2 s).
REOPEN_AFTER_ITEMS = 20_000
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass
class Target:
    """The run an invocation adds to and the model it sends to. ``run`` is None for a run still to create
    (from ``plan``); ``mode``: new | resume | retry_errors | shard (how this session is recorded)."""

    endpoint: ModelEndpoint
    mode: ModeKind
    run_id: str
    seed: int
    run: RunInfo | None = None
    plan: Plan | None = None
    shard: tuple[int, int] | None = None

    @property
    def shard_label(self) -> str | None:
        return None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}"


def refuse_early(config: ApplianceConfig, specs: SpecRegistry, selection: Selection, *, judges: bool = True) -> None:
    """What would fail only later, refused before anything else: a benchmark without parity for the asked prompt
    style; a benchmark its scorers cannot score (no judges for the jury, unless ``judges`` is off because the run
    is not scored now; loader options that give no field a metric reads): it would fail only after all
    inference."""
    if selection.prompt_style and selection.benchmarks:
        validate_benchmarks(selection.benchmarks, specs)
        for benchmark in selection.benchmarks:
            styled_spec(specs.get(benchmark), selection.prompt_style)
    check_benchmarks(config, [specs.get(b) for b in selection.benchmarks or []], judges=judges)


def _check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise BadInputError("--run-id: letters, digits, '.', '_' and '-' only (at most 128)")
    return run_id


# A CronJob names its Job <cronjob>-<the scheduled time in minutes since the epoch>, and the chart's sharded runner
# runs under that name (--run-id $(MEDHELM_JOB_NAME)): eight digits, a record number's shape, but a minute of the
# past weeks, which nobody chooses as they would a patient's number.
_SCHEDULED_JOB = re.compile(r"(?P<cronjob>.+)-(?P<minute>\d{8,10})")
_SCHEDULED_JOB_WINDOW_MIN = 31 * 24 * 60


# A Job started by hand as the chart's NOTES, its README and the RUNBOOK start one (kubectl create job
# --from=cronjob/... run-$(date +%Y%m%d-%H%M)): a date, but the moment the Job was created, in the operator's time
# zone (up to 14 hours either side of UTC), in the past weeks.
_STARTED_JOB = re.compile(r"(?P<job>.+)-(?P<stamp>\d{8}-\d{4})")
_ANY_TIME_ZONE_MIN = 14 * 60


def _without_scheduled_minute(run_id: str) -> str:
    """``run_id`` without a CronJob Job name's minute suffix, where it has one scheduled in the past 31 days, or
    the date and time a Job started by hand was named with, where it is of the past 31 days."""
    now = int(time.time() // 60)
    match = _SCHEDULED_JOB.fullmatch(run_id)
    if match is not None and now - _SCHEDULED_JOB_WINDOW_MIN <= int(match["minute"]) <= now + 5:
        return match["cronjob"]
    started = _STARTED_JOB.fullmatch(run_id)
    if started is not None:
        try:
            stamp = datetime.strptime(started["stamp"], "%Y%m%d-%H%M").replace(tzinfo=UTC)
        except ValueError:  # not a date and time: checked as written
            return run_id
        minute = int(stamp.timestamp() // 60)
        if now - _SCHEDULED_JOB_WINDOW_MIN - _ANY_TIME_ZONE_MIN <= minute <= now + _ANY_TIME_ZONE_MIN:
            return started["job"]
    return run_id


def _check_new_run_id(run_id: str) -> None:
    """A run created under an id the user chose is recorded under it in the audit trail (``run.start`` and every
    record after), ``audit report`` and exports: like an actor, it may hold no date, PHI pattern or encoded text.
    Checked before anything is recorded; an existing run keeps its id, and the runner's own forms pass (its
    generated ids, and a CronJob's Job names for the chart's sharded runs)."""
    problem = chosen_name_problem(_without_scheduled_minute(run_id))
    if problem is not None:
        raise BadInputError(f"--run-id: {NAME_REASONS[problem]}; a run id is recorded in the audit trail and "
                            "exports, so name the run in words (e.g. q3-discharge-review), never with a patient's "
                            "date, record number or encoded text, or leave --run-id out for a generated one. "
                            "Nothing was sent or recorded.")


def _check_style_of(run: RunInfo, selection: Selection) -> None:
    style = run_prompt_style(run.manifest)
    if selection.prompt_style and selection.prompt_style != style:
        raise BadInputError(f"--prompt-style: run {run.run_id} was planned with prompt style {style!r}, not "
                            f"{selection.prompt_style!r}; a run never mixes styles (start a new run)")


def _check_plan_of(run: RunInfo, selection: Selection) -> None:
    """A resume or retry sends the run's own plan: an option that plans a run, given with a value the run was not
    planned with, is refused, never silently ignored (``--max-instances 30`` on a run of 10 sent the 10)."""
    def names(benchmarks: list[str]) -> str:
        return ",".join(sorted(set(benchmarks)))

    given: dict[str, object] = {
        "--benchmarks": None if selection.benchmarks is None else names(selection.benchmarks),
        "--max-instances": selection.max_instances, "--seed": selection.seed, "--order": selection.order}
    own: dict[str, object] = {"--benchmarks": names(run.benchmarks),
                              "--max-instances": "all" if run.max_instances is None else run.max_instances,
                              "--seed": run.seed, "--order": run.manifest.get("order")}
    for flag, value in given.items():
        if value is not None and own[flag] is not None and value != own[flag]:
            raise BadInputError(f"{flag}: run {run.run_id} was planned with {own[flag]}, not {value}; a resume or "
                                "retry sends the run's own plan (leave the option out, or start a new run)")


class RunChanged(BadInputError):
    """Refused: adding to ``run`` would mix what it was created with (its benchmarks' specs, its model's identity)
    with something else. ``reason`` (``spec_changed``, ``model_identity_changed``, ``model_identity_unverifiable``:
    its servers answer no version now) and ``changed`` (the benchmarks whose spec changed, or the identity's
    fields) name what, never a value: the trail records them."""

    def __init__(self, message: str, run: RunInfo, *, reason: str, changed: list[str]) -> None:
        super().__init__(message)
        self.run_id, self.model, self.reason, self.changed = run.run_id, run.model, reason, changed


def _check_specs_frozen(run: RunInfo, specs: SpecRegistry) -> None:
    """Refuse to add to a run whose benchmarks' spec files changed since it was created: one run never mixes
    prompts or decoding. (The run itself always uses its snapshot; this says why it cannot go on.)"""
    changed = {b: fields for b in run.benchmarks if (fields := spec_changes(b, run.manifest, specs))}
    if changed:
        detail = "; ".join(f"benchmark {b}: {', '.join(fields[:6])}{' ...' if len(fields) > 6 else ''}"
                           for b, fields in changed.items())
        raise RunChanged(
            f"run {run.run_id} is frozen to the specs it was created with, and the spec changed since ({detail}); "
            "a run never mixes prompts or decoding: start a new run (--new-run), or restore the spec",
            run, reason="spec_changed", changed=sorted(changed))


def _named_run(store: Store, specs: SpecRegistry, selection: Selection, mode: Mode) -> RunInfo | None:
    """The existing run ``--resume`` / ``--retry-errors`` names, checked against the selection; else None."""
    if mode.kind not in ("resume", "retry_errors"):
        return None
    assert mode.run_id is not None
    run = store.get_run(mode.run_id)
    if run is None:
        raise NotFoundError(f"run {mode.run_id!r} not found; see `medhelm-local runs list`")
    if selection.model and selection.model != run.model:
        raise BadInputError(f"--model: run {mode.run_id} evaluates {run.model!r}, not {selection.model!r}")
    _check_style_of(run, selection)
    _check_plan_of(run, selection)
    _check_specs_frozen(run, specs)
    return run


def _planned_model(selection: Selection) -> tuple[str, list[str]]:
    if not selection.model or not selection.benchmarks:
        raise BadInputError("--model and --benchmarks are required unless --resume or --retry-errors names a run")
    return selection.model, selection.benchmarks


def resolve(store: Store, config: ApplianceConfig, specs: SpecRegistry, selection: Selection, mode: Mode) -> Target:
    """The run this invocation adds to, and its model's endpoint (the one place a model name is resolved).

    Resume / retry: the named run, with its own model and seed. New: the plan, then the unfinished run with the
    same plan key (or ``--run-id``'s) if there is one, else a run to create. Shard: the plan and the run every
    shard of it agrees on (``--run-id``, or derived from the plan key), created by the first shard there."""
    run = _named_run(store, specs, selection, mode)
    model, benchmarks = (run.model, run.benchmarks) if run is not None else _planned_model(selection)
    endpoint = config.model(model)
    if run is not None:
        return Target(endpoint=endpoint, mode=mode.kind, run=run, run_id=run.run_id, seed=run.seed)
    seed = config.runner.seed if selection.seed is None else selection.seed
    plan = compute_plan(store, specs, model, benchmarks, max_instances=selection.max_instances, seed=seed,
                        order_mode=selection.order or "prefix", prompt_style=selection.prompt_style or DEFAULT_STYLE,
                        shard=mode.shard)
    run_id = _check_run_id(mode.run_id) if mode.run_id else None
    if plan.shard is not None:
        run_id = run_id or derived_run_id(plan.plan_key)
    elif run_id is None and not mode.always_new:
        run_id = runs_db.find_resumable(store, plan.plan_key)
    existing = planned_run(store, specs, run_id, plan) if run_id is not None else None
    if existing is not None:
        assert run_id is not None
        return Target(endpoint=endpoint, mode="shard" if plan.shard is not None else "resume", run=existing,
                      plan=plan, run_id=run_id, seed=seed, shard=plan.shard)
    if run_id is not None and not is_generated_run_id(run_id, plan.plan_key):
        _check_new_run_id(run_id)
    return Target(endpoint=endpoint, mode=mode.kind, plan=plan, run_id=run_id or new_run_id(), seed=seed,
                  shard=plan.shard)


def planned_run(store: Store, specs: SpecRegistry, run_id: str, plan: Plan) -> RunInfo | None:
    """The run ``run_id`` where it exists, which must have been planned as ``plan`` (the same plan key) with the
    specs it was created with."""
    existing = store.get_run(run_id)
    if existing is None:
        return None
    meta = runs_db.runner_run(store, run_id)
    if meta is None or meta[0] != plan.plan_key:
        raise BadInputError(f"--run-id: run {run_id} exists with a different plan" + (
            "" if plan.shard is not None else
            " (model, benchmarks, seed, sample size, order, prompt style or dataset versions)"))
    _check_specs_frozen(existing, specs)
    return existing


# Servers that batch up to their capacity (vLLM: --max-num-seqs, 256 by default, like the cap) and queue the rest
# instead of refusing it: the limiter starts at the cap, as a round trip spent below capacity costs the run one
# latency. Not the embedded llama.cpp server, which answers one request at a time (a full queue there only
# lengthens every wait towards the timeout), nor other OpenAI-compatible servers, which may be rate-limited
# gateways: they start at half the cap.
QUEUEING_KINDS = frozenset({BackendKind.VLLM})

# The embedded llama.cpp server's default cap: it answers one request at a time, so two in flight keep it busy and
# any more only wait in its queue, each towards the request timeout (with the config's cap, 256, the limiter started
# at 128: every request past the first few dozen timed out on a CPU). ``--concurrency`` still sets another.
EMBEDDED_CONCURRENCY = 2


# The options of ``run`` that shape how a run sends (``Sending``'s fields), kept with the run.
SENT_WITH = ("concurrency", "initial_concurrency", "request_timeout_s", "max_retries")


@dataclass(frozen=True)
class SessionSending:
    """How this session sends: ``sending`` with every option of ``SENT_WITH`` resolved (``initial_concurrency``
    may stay None: the limiter's start for the server's kind); ``kept``: the run's own before this session (None:
    a run to create, or one from before runs kept them); ``changed``: what of ``kept`` an option given again
    changes, ``{option: [was, now]}``."""

    sending: Sending
    kept: dict[str, Any] | None = None
    changed: dict[str, list[Any]] | None = None

    @property
    def record(self) -> dict[str, Any]:
        """What the run and the session keep."""
        return {name: getattr(self.sending, name) for name in SENT_WITH}


def sending_for(store: Store, config: ApplianceConfig, target: Target, sending: Sending) -> SessionSending:
    """The sending options of this session: each one given (not None in ``sending``), else the run's own (a
    resume or retry never falls back to defaults the run did not start with), else the default (the config's
    ``runner`` settings, :data:`EMBEDDED_CONCURRENCY` for the embedded model, the model's ``timeout_s``). The cap
    never exceeds ``runner.max_concurrency``."""
    kept = runs_db.run_sending(store, target.run_id) if target.run is not None else None
    ceiling = config.runner.max_concurrency
    embedded = target.endpoint.kind == BackendKind.EMBEDDED
    defaults: dict[str, Any] = {"concurrency": min(EMBEDDED_CONCURRENCY, ceiling) if embedded else ceiling,
                                "initial_concurrency": None,
                                "request_timeout_s": target.endpoint.timeout_s,
                                "max_retries": config.runner.max_retries}
    given = {name: getattr(sending, name) for name in SENT_WITH if getattr(sending, name) is not None}
    base = {**defaults, **(kept or {})}
    chosen = {name: given.get(name, base[name]) for name in SENT_WITH}
    if chosen["concurrency"] > ceiling:  # say so: a silent cap looks like a slow server
        log.warning("run.concurrency_capped", requested=chosen["concurrency"], ceiling=ceiling,
                    setting="runner.max_concurrency")
        chosen["concurrency"] = ceiling
    changed = {name: [kept[name], chosen[name]] for name in given
               if kept is not None and name in kept and kept[name] != chosen[name]}
    return SessionSending(replace(sending, **chosen), kept, changed or None)


def execution_settings(config: ApplianceConfig, sending: Sending, endpoint: ModelEndpoint, *,
                       errors_only: bool) -> ExecutionSettings:
    ceiling = config.runner.max_concurrency
    cap = min(sending.concurrency or ceiling, ceiling)
    initial = sending.initial_concurrency
    if initial is None and endpoint.kind in QUEUEING_KINDS:
        initial = cap
    return ExecutionSettings(
        concurrency=cap, max_retries=config.runner.max_retries if sending.max_retries is None else sending.max_retries,
        initial_concurrency=None if initial is None else min(initial, cap), backoff_base_s=sending.backoff_base_s,
        errors_only=errors_only,
    )


def _check_served_model(endpoint: ModelEndpoint, servers: list[dict[str, Any]]) -> None:
    """Warn (not fail: some servers list aliases or file names) when a replica does not list the model id."""
    for server in servers:
        models = server.get("models") or []
        server["lists_model"] = not models or endpoint.model_id in models
        if not server["lists_model"]:
            log.warning("model.not_listed", model=endpoint.name, url=server["url"], served_models=models)


async def describe(store: Store, client: ChatClient, endpoint: ModelEndpoint
                   ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The model's servers (url, version, served models) and its weights' fingerprint (if configured; the
    embedded model's is always known: the GGUF file its server was started with)."""
    store.release()  # never hold the store's lock across network waits; the next query takes it back
    servers = await describe_servers(client, endpoint)
    _check_served_model(endpoint, servers)
    weights_path = endpoint.weights_path
    if weights_path is None and endpoint.kind == BackendKind.EMBEDDED:
        weights_path = smollm2_gguf_path()
    weights = weights_fingerprint(store, weights_path) if weights_path else None
    return servers, weights


async def token_counter(client: ChatClient, endpoint: ModelEndpoint) -> TokenCounter:
    """How the model's server counts tokens (its tokenize endpoint, else the estimate)."""
    return await open_counter(client, endpoint.kind, context_length=endpoint.context_tokens)


def check_identity(run: RunInfo, endpoint: ModelEndpoint, servers: list[dict[str, Any]],
                   weights: dict[str, Any] | None) -> list[str]:
    """Refuse to add to ``run`` from a model whose identity (served model, weights, server versions) changed.

    Returns what the run recorded but cannot be read now (e.g. the weights' hash of an endpoint configured
    without its weights file): unverified, never silently taken as unchanged (the caller records it)."""
    before = model_identity(run.manifest)
    now = model_identity({"model": {"served_model": endpoint.model_id, "weights": weights, "servers": servers}})
    changed = [k for k in before if before[k] not in (None, []) and now[k] not in (None, []) and before[k] != now[k]]
    if changed:
        raise RunChanged(
            f"run {run.run_id} was started against a different model ({', '.join(changed)} changed: "
            f"{ {k: before[k] for k in changed} } -> { {k: now[k] for k in changed} }); it cannot be resumed "
            "with this one. Start a new run (--new-run)",
            run, reason="model_identity_changed", changed=changed)
    # Versions the run recorded, and none answered now (its servers down, or /version unreachable): nothing says the
    # model changed, nor that it did not. Refused as before, but never recorded as a change.
    silent = [k for k in before if isinstance(before[k], list) and before[k] and now[k] == []]
    if silent:
        raise RunChanged(
            f"run {run.run_id} was started against servers that answered their version, and none answers one now "
            f"(down, or their /version unreachable): the model cannot be checked to be the one the run started "
            f"with. Add to it once its servers answer (`models wait {endpoint.name}`), or start a new run "
            "(--new-run)",
            run, reason="model_identity_unverifiable", changed=silent)
    unverified = [k for k in before if before[k] not in (None, []) and now[k] is None]
    if unverified:
        log.warning("run.identity_unverified", run_id=run.run_id, fields=unverified)
    return unverified


def new_run(config: ApplianceConfig, registry: SpecRegistry, target: Target, servers: list[dict[str, Any]],
            weights: dict[str, Any] | None, counter: TokenCounter) -> RunInfo:
    """The run to create from ``target.plan``, with its manifest (nothing is written yet)."""
    assert target.plan is not None
    plan = target.plan
    specs = plan.specs
    written = {b: registry.get(b) for b in plan.benchmarks}  # the style's hash is of the spec as written
    decoding: dict[str, Any] = {"temperature": 0.0, "seed": target.seed,
                                "max_tokens": {b: s.max_tokens for b, s in specs.items()}}
    if any(s.stop for s in specs.values()):
        decoding["stop"] = {b: s.stop for b, s in specs.items()}
    manifest = build_manifest(config=config, endpoint=target.endpoint, servers=servers, weights=weights,
                              datasets=plan.datasets, seed=target.seed, max_instances=plan.max_instances,
                              order_mode=plan.order_mode, decoding=decoding,
                              prompt_style=manifest_entry(plan.prompt_style, written),
                              specs=manifest_specs(specs), context=context_entry(target.endpoint, counter))
    if manifest["context"]["source"] == "default":
        log.warning("run.context_length_default", model=target.endpoint.name,
                    context_length=manifest["context"]["context_length"], setting="context_length")
    _refuse_no_room(target.endpoint.name, manifest["context"]["context_length"], specs)
    return RunInfo(run_id=target.run_id, model=target.endpoint.name, benchmarks=plan.benchmarks, created_at=utcnow(),
                   finished_at=None, status="planned", max_instances=plan.max_instances, seed=target.seed,
                   manifest=manifest)


def _refuse_no_room(model: str, context_length: int, specs: Mapping[str, BenchmarkSpec]) -> None:
    """A benchmark whose reply alone (``max_tokens``) takes the model's whole context leaves no room for any
    prompt: every item would only be recorded ``prompt_too_long``. Refused before the run is created."""
    full = {b: s.max_tokens for b, s in specs.items() if s.max_tokens >= context_length}
    if full:
        detail = ", ".join(f"{b} (max_tokens {n})" for b, n in full.items())
        raise BadInputError(
            f"model {model} has a context of {context_length} tokens, which the reply alone fills for {detail}: no "
            "prompt would fit. Evaluate these benchmarks on a model with a larger context (its context_length: "
            f"`models update {model} --context-length N`), or leave them out"
        )


def record_plan(store: Store, run: RunInfo, plan: Plan, manifest_sha256: str, sending: SessionSending) -> None:
    """Store the new run, the options it sends with and its planned items (streaming), before any request."""
    runs_db.insert_plan(store, run, plan_items(store, plan), plan_key=plan.plan_key, order_mode=plan.order_mode,
                        manifest_sha256=manifest_sha256, sending=sending.record)
    if sum(int(d["planned"]) for d in plan.datasets.values()) > REOPEN_AFTER_ITEMS:
        store.reopen()  # the send phase needs none of what planning left cached (100k items: about 80 MB)


def fitter(run: RunInfo, counter: TokenCounter, settings: ExecutionSettings) -> PromptFitter | None:
    """Fits prompts into the context length the run was created with (runs from before fitting: none)."""
    length = run_context_length(run.manifest)
    if length is None:
        return None
    return PromptFitter(counter, length, max_retries=settings.max_retries, backoff_base_s=settings.backoff_base_s)


def keep_sending(store: Store, target: Target, sending: SessionSending) -> None:
    """An existing run's options, where this session set them: an option given again that changes one, or a run
    from before runs kept them. A shard leaves them as they are: the pods of one Job send in parallel, each with
    the options its Job gives."""
    if target.run is not None and target.shard is None and (sending.kept is None or sending.changed):
        runs_db.keep_sending(store, target.run_id, sending.record)


def start_session(store: Store, target: Target, servers: list[dict[str, Any]], sending: SessionSending) -> str:
    """Record this invocation's session of the run (mode, shard, endpoints, sending options); returns its id."""
    session_id = uuid.uuid4().hex[:12]
    runs_db.start_session(store, target.run_id, session_id, mode=target.mode, shard=target.shard_label,
                          endpoints=servers, sending=sending.record)
    return session_id


async def send(store: Store, client: ChatClient, run: RunInfo, session_id: str, settings: ExecutionSettings,
               sending: Sending, fit: PromptFitter | None, specs: SpecRegistry, *, score_as_answered: bool = False
               ) -> ExecutionReport:
    """Send the run's pending items (or its errors) from ``store``, committing each outcome as it arrives (with
    ``score_as_answered``, its score rows too, where no judge is needed: ``ScoreAsAnswered``)."""
    frozen = {b: spec_for_run(b, run.manifest, specs) for b in run.benchmarks}
    scoring = ScoreAsAnswered(frozen) if score_as_answered else None
    with RunProgress(run.run_id, enabled=sending.show_progress) as progress, long_lived_objects_frozen():
        return await execute_run(store, client, run, specs=frozen, settings=settings, progress=progress,
                                 session_id=session_id, fitter=fit, scoring=scoring)
