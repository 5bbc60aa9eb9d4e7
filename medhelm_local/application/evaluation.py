"""The use cases ``evaluate`` (``run``, the demo, the bench) and ``merge shards`` (``runs merge``).

One path for every mode (``runner.options.Mode``): a new run, a resume, a retry of the errors, one shard of a
run split across pods. In order:

1. refuse early what would fail later (prompt-style parity; a benchmark its scorers cannot score: a jury
   without judges, loader options giving no field a metric reads);
2. open the main store (a shard waits, with jitter, while another pod holds it), conclude the run intents killed
   processes left open on runs finished or never created (``application.run_intents``), and resolve the run and its
   model (``runner.session.resolve``: the one place the model is resolved) and how it sends (the options given,
   else the run's own: ``runner.session.sending_for``); take the run's lock (a shard takes its run's shard lock,
   shared: shards of one run send in parallel, each from its own store file), held until the run is concluded.
   The run lock excludes the shards of its run: a run, resume or retry is refused while any sends, and merges
   the shard files dead shards left before it sends; a shard waits while a resume sends;
3. ask the model's servers who they are; create the run (audit ``run.start``, manifest, sending options and
   plan stored before any request) or check that the model is the one the run started with (audit
   ``run.resume``, with the sending options and any an option given again changed); adding to a run whose specs
   or model changed since it was created is refused, and audited (``run.resume`` ``refused``, opening no intent);
4. send: from the main store, or, for a shard, from its own store file holding its slice of the send order (the
   main store is given back meanwhile);
5. a shard merges its outcomes back; a run with every item answered is scored and finished (audit
   ``run.finish``). A failure marks the run this invocation set running as failed (or interrupted) and leaves
   a ``run.finish`` failure record (each attempted even where the other fails: the run's own error is the one
   raised); so does one after ``run.start`` but before the run is live (its plan not stored), which names the
   error's class only.

A shard leaves its run's status as it is (other shards may still be sending it; readers see whether any is:
``runner.liveness``). Its failure, once its run exists, concludes the run's open intent in the trail (``run.start``,
or a ``run.resume``) with a ``run.finish`` failure naming that intent; a shard that takes up an unfinished run
with no open intent (a failure concluded it) or finds its own file (its pod was restarted) announces itself with
``run.resume``, which the run's end, or the shard's own failure, concludes. The merge that completes a run with no
open intent (a shard's, ``runs merge``) takes the run up again the same way (``run.resume``, mode shard or merge):
every ``run.finish`` concludes an intent, which it names; ``runs merge`` failing to finish the run concludes it
with a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from medhelm_local.analysis.aggregate import benchmark_score
from medhelm_local.application.run_intents import conclude_left_open
from medhelm_local.audit import audit_event
from medhelm_local.audit.intents import FINISHED_STATUSES, INTENT_SEQ, open_intent
from medhelm_local.audit.trail import AuditTrail, AuditWriteError
from medhelm_local.context import AppContext
from medhelm_local.deployment import (
    no_model_egress,
    refuse_sending_without_egress,
    refuse_without_model_egress,
    runner_cronjob,
    send_again_hint,
)
from medhelm_local.errors import BadInputError, Interrupted, NotFoundError
from medhelm_local.home import Home
from medhelm_local.home.config import BackendKind
from medhelm_local.inference.backends import open_client
from medhelm_local.inference.client import ChatClient
from medhelm_local.inference.tokens import TokenCounter
from medhelm_local.logs import get_logger
from medhelm_local.prompts.styles import spec_for_run
from medhelm_local.records import BenchmarkScore
from medhelm_local.runner import session
from medhelm_local.runner import shard as sharding
from medhelm_local.runner.execute import ExecutionReport, ExecutionSettings
from medhelm_local.runner.manifest import manifest_sha256
from medhelm_local.runner.options import EvaluationRequest, Mode, Selection, Sending
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.scoring.registry import networked_judges
from medhelm_local.store import Store
from medhelm_local.store import runs as runs_db
from medhelm_local.store import shards as shards_db
from medhelm_local.store.runlock import run_lock, shard_lock
from medhelm_local.store.store import RunInfo

log = get_logger(__name__)

__all__ = ["EvaluationRequest", "Mode", "RunOutcome", "Selection", "Sending", "evaluate", "merge_shards"]


@dataclass
class RunOutcome:
    run: RunInfo
    mode: str  # new | resume | retry_errors | shard | merge
    results: list[BenchmarkScore] = field(default_factory=list)
    report: ExecutionReport | None = None
    sending: dict[str, Any] | None = None  # the options this invocation sent with (runner.session.SENT_WITH)
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    complete: bool = True
    shard: str | None = None
    merged: int | None = None  # outcomes this merge added to the run
    already_present: int | None = None  # outcomes of the merged files the run already had (a merge repeated)


@dataclass
class _Taken:
    """What an invocation has done to its run so far: what its failure path concludes."""

    live: str | None = None  # the run it set running (not a shard): marked failed or interrupted on failure
    shard_of: str | None = None  # the run a shard takes part in, once that run exists
    concluded: bool = False  # its failure is already recorded (one before its new run was live)


def evaluate(app_ctx: AppContext, request: EvaluationRequest) -> RunOutcome:
    """Run (or resume, or retry the errors of, or send one shard of) an evaluation; score it once complete."""
    home = app_ctx.home
    config = home.config
    session.refuse_early(config, app_ctx.specs, request.selection, judges=request.score)
    mode = request.mode
    taken = _Taken()
    with ExitStack() as main_scope:
        try:
            main = main_scope.enter_context(_open_main(app_ctx, mode))
            conclude_left_open(app_ctx, main)  # before this process takes a run's lock (see there)
            target = session.resolve(main, config, app_ctx.specs, request.selection, mode)
            if no_model_egress():
                _refuse_sending_here(app_ctx, target, mode, score=request.score)
            sending = session.sending_for(main, config, target, request.sending)
            settings = session.execution_settings(config, sending.sending, target.endpoint,
                                                  errors_only=mode.kind == "retry_errors")
            held = (shard_lock(home.store_path, target.run_id, config.store) if target.shard
                    else run_lock(home.store_path, target.run_id, config.store))
            main.release()  # while this waits for the lock, the process holding it writes the store
            with held:
                if target.shard is not None and target.run is not None:
                    taken.shard_of = target.run_id  # not before: a shard refused its lock takes no part in the run
                if target.shard is None and target.run is not None:
                    _merge_left_shards(app_ctx, main, target.run_id)
                if mode.kind == "retry_errors":
                    _refuse_retry_with_items_unsent(main, target.run_id)
                run, report = asyncio.run(_infer(app_ctx, main, main_scope, target, sending, settings, taken,
                                                 score=request.score))
                if target.shard is None:
                    outcome = _finish(app_ctx, main, run, score=request.score, mode=target.mode,
                                      scored=report.scored)
                else:
                    outcome = _merge_back(app_ctx, target, score=request.score)
        except BaseException as exc:
            if isinstance(exc, session.RunChanged):
                _record_refusal(app_ctx, exc, mode)
            if taken.live is not None:
                _record_failure(app_ctx, main, taken.live, exc)
            elif mode.shard is not None and not taken.concluded:
                _conclude_shard_failure(app_ctx, mode.shard_label, taken.shard_of, exc)
            if isinstance(exc, KeyboardInterrupt) and taken.live is not None:
                # A resume sends only items without an outcome: the failures a retry had not re-sent yet need
                # the retry again.
                retrying = mode.kind == "retry_errors"
                again, rest = (("--retry-errors", "re-sends the failures not retried yet") if retrying
                               else ("--resume", "sends the rest"))
                command = (send_again_hint(taken.live, again) if runner_cronjob() is not None else
                           f"`medhelm-local --home {shlex.quote(str(home.root))} run {again} {taken.live}`")
                raise Interrupted(f"interrupted: run {taken.live} keeps every answer it received; {command} "
                                  f"{rest}") from None
            raise
    outcome.report = report
    outcome.sending = sending.record
    return outcome


def _refuse_sending_here(app_ctx: AppContext, target: session.Target, mode: Mode, *, score: bool) -> None:
    """In a pod that reaches no model or judge server: refused where this run sends to its model's servers, or
    its judges (an embedded model's run, scored now) are asked over the network."""
    benchmarks = target.run.benchmarks if target.run is not None else target.plan.benchmarks if target.plan else []
    judges = networked_judges(app_ctx.home.config, [app_ctx.specs.get(b) for b in benchmarks]) if score else []
    if target.endpoint.kind != BackendKind.EMBEDDED or judges:
        refuse_sending_without_egress(target.run_id if target.run is not None else None,
                                      "--retry-errors" if mode.kind == "retry_errors" else "--resume",
                                      judges=[] if target.endpoint.kind != BackendKind.EMBEDDED else judges)


def _record_refusal(app_ctx: AppContext, refused: session.RunChanged, mode: Mode) -> None:
    """A resume (retry, shard, a run finding its unfinished run) refused because the run's specs or model changed:
    ``run.resume`` ``refused``, before any intent (it concludes nothing, and opens nothing), naming the run, the
    reason and what changed (benchmark ids or identity fields, never a value). Who tried to add to a frozen run
    with something else is the trail's to say. The trail refusing the record must not hide the refusal itself."""
    try:
        audit_event(app_ctx.home, app_ctx.actor, "run.resume", outcome="refused", role="informatics",
                    run_id=refused.run_id, model=refused.model, mode=mode.kind, reason=refused.reason,
                    changed=refused.changed, **{INTENT_SEQ: None})
    except Exception as audit_error:
        log.warning("run.refusal_not_recorded", run_id=refused.run_id, error_type=type(audit_error).__name__)


def _record_failure(app_ctx: AppContext, main: Store, run_id: str, exc: BaseException) -> None:
    """Mark the run this invocation set running failed (interrupted for Ctrl-C or SIGTERM) and record its
    ``run.finish`` failure (the error's class only). Either step failing too (a full disk, a store error) must not
    hide ``exc``, the error the user needs, nor stop the other: the status not stored leaves the run ``running``,
    which readers show as interrupted once no process sends it."""
    try:
        main.set_run_status(run_id, "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
    except Exception as status_error:
        log.warning("run.status_not_stored", run_id=run_id, error_type=type(status_error).__name__)
    try:
        audit_event(app_ctx.home, app_ctx.actor, "run.finish", outcome="failure", role="informatics", run_id=run_id,
                    error_type=type(exc).__name__)
    except Exception as audit_error:
        log.warning("run.finish_not_recorded", run_id=run_id, error_type=type(audit_error).__name__)


def merge_shards(app_ctx: AppContext, run_id: str, *, score: bool = True) -> RunOutcome:
    """``runs merge``: fold every shard file left for ``run_id`` into the main store; finish it if complete. It
    holds the run's lock, as a resume does: refused while any shard of the run sends (their files are in use)."""
    home = app_ctx.home
    refused_because = "runs merge would fold in and remove the files they are writing"
    with sharding.open_main_store(home) as main:
        if score and no_model_egress() and (run := main.get_run(run_id)) is not None:
            _refuse_judging_here(app_ctx, run)
        conclude_left_open(app_ctx, main)  # before this process takes the run's lock (see there)
    with run_lock(home.store_path, run_id, home.config.store, refused_because=refused_because), \
            sharding.open_main_store(home) as main:
        if main.get_run(run_id) is None:
            raise NotFoundError(f"run {run_id!r} not found; see `medhelm-local runs list`")
        merged = _merge_shard_files(app_ctx, main, run_id)
        sharding.remove_abandoned_builds(home, run_id)
        return _conclude(app_ctx, main, run_id, score=score, mode="merge", merged=merged)


def _refuse_judging_here(app_ctx: AppContext, run: RunInfo) -> None:
    """``runs merge`` in a pod that reaches no judge server: refused where completing the run would score it with
    judges asked over the network (before anything is merged: the merge that completes a run scores it). A run
    already finished (or inferred) is not scored again."""
    if run.status in FINISHED_STATUSES:
        return
    judges = networked_judges(app_ctx.home.config, [app_ctx.specs.get(b) for b in run.benchmarks])
    if judges:
        refuse_without_model_egress(
            f"runs merge scores run {run.run_id} once complete, asking the judges ({', '.join(judges)})",
            f"finish it as {send_again_hint(run.run_id)}, which merges the shard files first and then scores; or "
            "merge here with --skip-scoring (a run it completes ends inferred, not scored, until that Job)")


# -- the steps ----------------------------------------------------------------------------------------------


def _merge_shard_files(app_ctx: AppContext, main: Store, run_id: str) -> shards_db.Merged:
    """Fold every shard file left for ``run_id`` into ``main`` (audit ``run.merge``: the outcomes it added, and
    those already there); returns the outcomes merged."""
    home = app_ctx.home
    merged = shards_db.Merged()
    for path in sharding.pending_shard_files(home, run_id):
        merged += sharding.merge_shard(main, path, home, run_id)
        sharding.remove_shard_files(path)
    audit_event(home, app_ctx.actor, "run.merge", role="informatics", run_id=run_id, merged=merged.added,
                already_present=merged.already_present)
    return merged


def _merge_left_shards(app_ctx: AppContext, main: Store, run_id: str) -> None:
    """Before a run, resume or retry of an existing run (its lock held, so no shard of it sends): the shard files
    dead shards left are merged first. Their items would otherwise be sent again, and each file's outcomes, merged
    later, would lose to the new ones."""
    if sharding.pending_shard_files(app_ctx.home, run_id):
        _merge_shard_files(app_ctx, main, run_id)
    sharding.remove_abandoned_builds(app_ctx.home, run_id)


def _refuse_retry_with_items_unsent(main: Store, run_id: str) -> None:
    """``--retry-errors`` re-sends failed requests only, then finishes the run: on a run whose process was stopped
    before it sent every item, it marked the run finished, its unsent items missing from every number. Refused
    (exit 2, nothing sent) until a resume has sent them."""
    unsent = shards_db.unanswered(main, run_id)
    if unsent:
        raise BadInputError(
            f"run {run_id} has {unsent} item(s) never sent (its process was stopped before it sent them), and "
            f"--retry-errors re-sends failed requests only: {send_again_hint(run_id, quoted=True)} sends them "
            "first, then --retry-errors redoes the failures")


@contextmanager
def _open_main(app_ctx: AppContext, mode: Mode) -> Iterator[Store]:
    """The home's main store; a shard waits (with jitter) while another pod holds it."""
    opened = sharding.open_main_store(app_ctx.home) if mode.shard is not None else app_ctx.open_store()
    with opened as store:
        yield store


async def _infer(app_ctx: AppContext, main: Store, main_scope: ExitStack, target: session.Target,
                 sending: session.SessionSending, settings: ExecutionSettings, taken: _Taken, *, score: bool
                 ) -> tuple[RunInfo, ExecutionReport]:
    config = app_ctx.home.config
    async with open_client(config, target.endpoint, max_connections=settings.concurrency,
                           timeout_s=sending.sending.request_timeout_s, egress=app_ctx.egress) as client:
        servers, weights = await session.describe(main, client, target.endpoint)
        counter = await session.token_counter(client, target.endpoint)
        run = _open_run(app_ctx, main, target, servers, weights, counter, sending, taken)
        if target.shard is None:
            taken.live = run.run_id
        with _sending_store(app_ctx, main, main_scope, target, run) as store:
            report = await _send(app_ctx, store, client, target, run, servers, settings, sending, counter,
                                 score=score)
        return run, report


def _open_run(app_ctx: AppContext, main: Store, target: session.Target, servers: list[dict[str, Any]],
              weights: dict[str, Any] | None, counter: TokenCounter, sending: session.SessionSending,
              taken: _Taken) -> RunInfo:
    """Create the run (audit ``run.start``, then its plan and sending options), or check the model is the one
    the run started with (and keep the sending options an option given again changed); the run is then
    ``running`` (a shard of an existing run leaves its status to the shard that created it, unless it takes the
    run up again: :func:`_take_up_again`)."""
    home = app_ctx.home
    if target.run is None and target.shard is not None:
        # Another shard may have created the run while this one asked its servers (the store was given back then);
        # from this query until the run is stored, this process holds the store.
        assert target.plan is not None
        target.run = session.planned_run(main, app_ctx.specs, target.run_id, target.plan)
    if target.run is None:
        assert target.plan is not None
        run = session.new_run(home.config, app_ctx.specs, target, servers, weights, counter)
        digest = manifest_sha256(run.manifest)
        started = audit_event(home, app_ctx.actor, "run.start", role="informatics", run_id=run.run_id,
                              model=run.model, endpoints=[s["url"] for s in servers], datasets=target.plan.datasets,
                              manifest_sha256=digest, shards=None if target.shard is None else target.shard[1],
                              sending=sending.record)
        try:  # until the run is live (the caller's failure path concludes it then), a failure concludes it here
            session.record_plan(main, run, target.plan, digest, sending)
            main.set_run_status(run.run_id, "running")
        except BaseException as exc:
            taken.concluded = True
            with contextlib.suppress(AuditWriteError):  # the trail refusing too: the original error is the one to see
                audit_event(home, app_ctx.actor, "run.finish", outcome="failure", role="informatics",
                            run_id=run.run_id, error_type=type(exc).__name__, **{INTENT_SEQ: started.get("seq")})
            raise
        if target.shard is not None:
            taken.shard_of = run.run_id
        return run
    else:
        run = target.run
        if target.shard is not None:
            taken.shard_of = run.run_id
            session.check_identity(run, target.endpoint, servers, weights)
            _take_up_again(app_ctx, main, target, run)
            return run
        unverified = session.check_identity(run, target.endpoint, servers, weights)
        extra: dict[str, Any] = {"identity_unverified": unverified} if unverified else {}
        if sending.changed:
            extra["sending_changed"] = sending.changed
        audit_event(home, app_ctx.actor, "run.resume", role="informatics", run_id=run.run_id, model=run.model,
                    mode=target.mode, sending=sending.record, **extra)
        session.keep_sending(main, target, sending)
    main.set_run_status(run.run_id, "running")
    return run


def _take_up_again(app_ctx: AppContext, main: Store, target: session.Target, run: RunInfo) -> None:
    """A shard joining an unfinished run announces itself (``run.resume``, mode shard) where it takes the run up
    again: its own file is there (its pod was restarted), or the run has no open intent in the trail (a shard's
    failure concluded it). The run's end, or this shard's failure, then concludes that intent, and a shard killed
    meanwhile leaves it open, as any resume would. A shard of a finished run has nothing to take up."""
    assert target.shard is not None
    home = app_ctx.home
    stored = main.get_run(run.run_id)  # as it is now: a resume this shard waited for may have finished it
    if stored is None or stored.status in FINISHED_STATUSES:
        return
    restarted = sharding.shard_store_path(home, run.run_id, *target.shard).exists()
    if not restarted and _open_run_intent(home, run.run_id) is not None:
        return
    audit_event(home, app_ctx.actor, "run.resume", role="informatics", run_id=run.run_id, model=run.model,
                mode="shard", shard=target.shard_label)
    if stored.status != "running":
        main.set_run_status(run.run_id, "running")


def _open_run_intent(home: Home, run_id: str) -> int | None:
    """The seq of the run's intent (``run.start`` or ``run.resume``) that no ``run.finish`` concludes yet."""
    intent = open_intent(AuditTrail(home.audit_path).records(), "run.finish", run_id)
    seq = None if intent is None else intent.get("seq")
    return seq if isinstance(seq, int) else None


def _conclude_shard_failure(app_ctx: AppContext, shard: str | None, run_id: str | None, exc: BaseException) -> None:
    """Record a shard's failure (the error's class only). Once its run exists, it concludes the run's open intent,
    which it names: the run cannot finish until this shard's slice is sent again. A shard failing before its run
    exists, or whose run has no open intent (another shard's failure concluded it; it is finished), concludes
    nothing. The trail refusing the record (a full disk) must not hide ``exc``, the error the user needs."""
    home = app_ctx.home
    intent = None
    if run_id is not None:
        with contextlib.suppress(AuditWriteError, OSError):  # a trail that cannot be read: the record concludes nothing
            intent = _open_run_intent(home, run_id)
    concludes: dict[str, Any] = {} if intent is None else {"run_id": run_id, INTENT_SEQ: intent}
    try:
        audit_event(home, app_ctx.actor, "run.finish", outcome="failure", role="informatics", shard=shard,
                    error_type=type(exc).__name__, **concludes)
    except Exception as audit_error:
        log.warning("run.finish_not_recorded", run_id=run_id, shard=shard, error_type=type(audit_error).__name__)


@contextmanager
def _sending_store(app_ctx: AppContext, main: Store, main_scope: ExitStack, target: session.Target, run: RunInfo
                   ) -> Iterator[Store]:
    """The store the items are sent from: the main store; for a shard, its own file with the part of its slice
    still unanswered (built now unless a restarted pod finds it), while the main store is given back."""
    if target.shard is None:
        yield main
        return
    home = app_ctx.home
    path = sharding.shard_store_path(home, run.run_id, *target.shard)
    if not path.exists():
        todo = sharding.unanswered_slice(main, run.run_id, *target.shard)
        sharding.build_shard_store(home, main, run, todo, path)
    main_scope.close()  # other pods plan and merge meanwhile
    with Store.open_file(home, path) as store:
        yield store


async def _send(app_ctx: AppContext, store: Store, client: ChatClient, target: session.Target, run: RunInfo,
                servers: list[dict[str, Any]], settings: ExecutionSettings, sending: session.SessionSending,
                counter: TokenCounter, *, score: bool) -> ExecutionReport:
    session_id = session.start_session(store, target, servers, sending)
    for server in servers:
        audit_event(app_ctx.home, app_ctx.actor, "endpoint.use", role="informatics", run_id=run.run_id,
                    session_id=session_id, url=server["url"], served_model=client.model_id,
                    server_version=server.get("version"))
    # A run created now is scored as it is answered, where no judge is needed; one resumed or retried is scored
    # whole at the end, so that a run's scores never mix two versions of a scorer.
    return await session.send(store, client, run, session_id, settings, sending.sending,
                              session.fitter(run, counter, settings), app_ctx.specs,
                              score_as_answered=score and target.run is None and target.shard is None)


def _merge_back(app_ctx: AppContext, target: session.Target, *, score: bool) -> RunOutcome:
    """A shard's outcomes into the main store; the shard that completes the run scores and finishes it."""
    assert target.shard is not None
    home = app_ctx.home
    path = sharding.shard_store_path(home, target.run_id, *target.shard)
    with sharding.open_main_store(home) as main:
        merged = sharding.merge_shard(main, path, home, target.run_id)
        sharding.remove_shard_files(path)
        return _conclude(app_ctx, main, target.run_id, score=score, mode="shard", shard=target.shard_label,
                         merged=merged)


def _conclude(app_ctx: AppContext, main: Store, run_id: str, *, score: bool, mode: str,
              merged: shards_db.Merged, shard: str | None = None) -> RunOutcome:
    """After a merge: finish the run if every item is answered (and it is not finished yet), else say so."""
    run = main.get_run(run_id)
    assert run is not None
    complete = shards_db.unanswered(main, run_id) == 0
    if complete and run.status not in FINISHED_STATUSES:
        intent = _intent_to_finish(app_ctx, run, mode=mode, shard=shard)
        if mode != "merge":  # a shard's failure is concluded by its invocation's failure path
            return _counted(_finish(app_ctx, main, run, score=score, mode=mode, shard=shard, intent=intent), merged)
        try:
            return _counted(_finish(app_ctx, main, run, score=score, mode=mode, intent=intent), merged)
        except BaseException as exc:
            with contextlib.suppress(AuditWriteError):  # the trail refusing too: the original error is the one to see
                audit_event(app_ctx.home, app_ctx.actor, "run.finish", outcome="failure", role="informatics",
                            run_id=run_id, error_type=type(exc).__name__, **{INTENT_SEQ: intent})
            raise
    return _counted(RunOutcome(run=run, mode=mode, errors=runs_db.errors_by_category(main, run_id),
                               complete=complete, shard=shard), merged)


def _counted(outcome: RunOutcome, merged: shards_db.Merged) -> RunOutcome:
    outcome.merged, outcome.already_present = merged.added, merged.already_present
    return outcome


def _intent_to_finish(app_ctx: AppContext, run: RunInfo, *, mode: str, shard: str | None) -> int | None:
    """The run's open intent, which finishing it after a merge concludes. Where a shard's failure concluded the
    last one, the merge that completes the run (a shard's, ``runs merge``) takes the run up again: ``run.resume``
    (``mode`` shard or merge), as a shard restarted does."""
    home = app_ctx.home
    intent = _open_run_intent(home, run.run_id)
    if intent is not None:
        return intent
    resumed = audit_event(home, app_ctx.actor, "run.resume", role="informatics", run_id=run.run_id, model=run.model,
                          mode=mode, **({} if shard is None else {"shard": shard}))
    seq = resumed.get("seq")
    return seq if isinstance(seq, int) else None


def _finish(app_ctx: AppContext, store: Store, run: RunInfo, *, score: bool, mode: str, shard: str | None = None,
            scored: Mapping[str, int] | None = None, intent: int | None = None) -> RunOutcome:
    """Score the run (``scored``: answers this invocation scored as they arrived, per benchmark: a benchmark it
    answered and scored whole is not scored again) and mark it finished; ``intent``: the seq of the run's intent
    its ``run.finish`` concludes (None: the latest open one, found by the trail's readers)."""
    config = app_ctx.home.config
    results = []
    if score:
        for benchmark in run.benchmarks:
            if not _scored_whole(store, app_ctx, run, benchmark, (scored or {}).get(benchmark, 0)):
                score_benchmark(store, app_ctx.specs, run.run_id, benchmark, config=config, egress=app_ctx.egress)
            results.append(benchmark_score(store, app_ctx.specs, run.run_id, run.model, benchmark))
    store.set_run_status(run.run_id, "finished" if score else "inferred", finished=True)
    errors = runs_db.errors_by_category(store, run.run_id)
    scored_n, failed_n = sum(r.n for r in results), sum(r.n_failed for r in results)
    # A run that scored nothing of what it tried is no success, in the trail as in its exit code.
    audit_event(app_ctx.home, app_ctx.actor, "run.finish", role="informatics", run_id=run.run_id, model=run.model,
                outcome="failure" if failed_n and not scored_n else "success", scored=scored_n, failed=failed_n,
                errors=sum(sum(v.values()) for v in errors.values()),
                **({} if intent is None else {INTENT_SEQ: intent}))
    finished = store.get_run(run.run_id)
    assert finished is not None
    return RunOutcome(run=finished, mode=mode, results=results, errors=errors, shard=shard)


def _scored_whole(store: Store, app_ctx: AppContext, run: RunInfo, benchmark: str, scored: int) -> bool:
    """Whether this invocation scored every answer of ``benchmark`` as it arrived: as many as the run has, each with
    its main metric's row (committed with the answer, in one transaction)."""
    if not scored:
        return False
    metric = spec_for_run(benchmark, run.manifest, app_ctx.specs).metric
    answered, unscored = runs_db.unscored(store, run.run_id, benchmark, metric)
    return answered == scored and unscored == 0
