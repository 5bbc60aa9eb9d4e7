"""Sending a run's pending requests and committing each outcome as it arrives (write-through).

* Work streams from the store in pages (keyset paging on the send order), so memory stays flat whatever the
  run's size; the next pages (``prefetch_pages``, across benchmarks) are read while the current one is sent.
* Each attempt is admitted by the adaptive concurrency limiter; retries back off without holding a slot.
* A prompt that might not fit the model's context is fitted first (``runner.fitting``: counted by the server's
  tokenizer, its long field cut and the cut recorded, or ``prompt_too_long`` recorded without sending); the
  others go out as built.
* Outcomes are committed by one store thread in group commits, at most one round every
  ``commit_interval_s``, and rounds spaced so that they (with the checkpoint DuckDB makes when the store is
  released, which grows with the store's tables) keep the store thread at most ``commit_duty`` busy: a response
  counts as done only once its transaction has committed. After ``kill -9``
  only uncommitted (in-flight) items are sent again, and the primary key on ``responses`` keeps one outcome per
  item.
* The store's file lock is held only while a page is read or a round commits, never while waiting for the
  model server: read-only commands (doctor, leaderboard, runs, datasets list) open it during a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.inference.client import ChatClient, RequestFailed
from medhelm_local.prompts.build import build_request
from medhelm_local.records import InferenceRequest, InferenceResult, Instance, Truncated
from medhelm_local.runner.concurrency import AdaptiveLimiter
from medhelm_local.runner.fitting import PromptFitter
from medhelm_local.runner.progress import RunProgress
from medhelm_local.scoring.engine import ScoreAsAnswered
from medhelm_local.store import runs as runs_db
from medhelm_local.store.runs import Outcome, PendingItem
from medhelm_local.store.store import RunInfo, Store

T = TypeVar("T")
MAX_COMMIT_GAP_FACTOR = 5  # however slow a round, the next one comes within 5 commit intervals


@dataclass
class ExecutionSettings:
    concurrency: int
    max_retries: int
    initial_concurrency: int | None = None
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    page_size: int = 512
    commit_batch: int = 512
    commit_interval_s: float = 1.0  # at most one round of commits this often; the store is free in between
    commit_duty: float = 0.1  # and rounds (commit + the checkpoint on release) keep the store at most this busy
    prefetch_pages: int = 2  # pages read ahead of the one being sent (across benchmarks)
    errors_only: bool = False  # `run --retry-errors`: send only items whose stored outcome is an error


@dataclass
class ExecutionReport:
    session_id: str
    sent: int = 0
    ok: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    peak_concurrency: int = 0
    final_concurrency: int = 0
    concurrency_history: list[tuple[float, int, str]] = field(default_factory=list)
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    cpu_s: float = 0.0  # this process's CPU time (all threads) during the send phase
    counted: int = 0  # prompts that needed the tokenizer to fit the model's context
    truncated: int = 0  # prompts cut to fit
    scored: dict[str, int] = field(default_factory=dict)  # per benchmark: answers scored as they arrived


class StoreThread:
    """Every store call during execution runs on this one thread, in order: DuckDB connections are not
    shareable across threads, and the event loop must never block on a commit.

    With ``release``, the store's file lock is given back after every call (the next call re-attaches it in a
    few milliseconds): the run holds the store only while it reads a page or commits a batch, never while it
    waits for the model server, so read-only commands work during a run (issue 12 §6)."""

    def __init__(self, release: Store | None = None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="medhelm-store")
        self._release = release

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: self._run(True, fn, *args, **kwargs))

    async def call_and_keep(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Like ``call``, but the store stays attached: for the send phase's last call, as what follows (scoring,
        the run's status) attaches it again at once; releasing would cost DuckDB's checkpoint twice."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: self._run(False, fn, *args, **kwargs))

    def _run(self, release: bool, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            if release and self._release is not None:
                self._release.release()

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class GroupCommitter:
    """Commits outcomes in batches: at most one round of commits every ``interval_s`` (each round commits what
    arrived since, ``max_batch`` outcomes per transaction), so the store's lock is free between rounds.

    ``submit`` does not wait for durability: an outcome counts as done for a resume only once its transaction
    has committed (after ``kill -9`` the uncommitted ones are sent again). A failed commit is raised by the
    next ``submit`` / ``check`` and by ``close``, which commits what is left."""

    def __init__(self, db: StoreThread, store: Store, run_id: str, session_id: str, *, replace_errors: bool,
                 max_batch: int, started: float, interval_s: float = 0.0, duty: float = 1.0) -> None:
        self._db = db
        self._store = store
        self._run_id = run_id
        self._session_id = session_id
        self._replace = replace_errors
        self._max_batch = max_batch
        self._started = started
        self._interval_s = interval_s
        self._duty = duty
        self._queue: list[Outcome] = []
        self._wakeup = asyncio.Event()
        self._closing = False
        # Ends a pause between rounds at once: set by ``close`` (the last round never waits) and by ``drain``.
        self._hurry = asyncio.Event()
        self._draining = False
        self._task = asyncio.create_task(self._run())

    def check(self) -> None:
        """Raise the commit failure, if a round failed."""
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            raise self._task.exception()  # type: ignore[misc]

    def submit(self, outcome: Outcome) -> None:
        self.check()
        self._queue.append(outcome)
        self._wakeup.set()

    def drain(self) -> None:
        """Everything has been sent. What is queued is committed at once, while the replies still in flight are
        awaited (left for the last round, it was committed only after the last reply: up to a whole gap of
        outcomes, 0.15-0.33 s after it at 250 ms latency, bench/README.md); what is left arrives within about a
        round trip, so the next round waits for ``close`` (or the longest gap) and commits it all."""
        self._draining = True
        if self._queue:
            self._hurry.set()

    def _commit_round(self, outcomes: list[Outcome], wall_s: float) -> None:
        for start in range(0, len(outcomes), self._max_batch):
            runs_db.commit_outcomes(self._store, self._run_id, self._session_id, wall_s,
                                    outcomes[start:start + self._max_batch], replace_errors=self._replace)

    async def _run(self) -> None:
        last_round = -float("inf")
        gap = self._interval_s
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not self._closing:
                pause = last_round + (MAX_COMMIT_GAP_FACTOR * self._interval_s if self._draining else gap) \
                    - time.monotonic()
                if pause > 0:  # readers get the store meanwhile; outcomes accumulate
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._hurry.wait(), pause)
                if not self._closing:
                    self._hurry.clear()  # drain's round is this one: the next waits for close
            if self._queue:
                batch, self._queue = self._queue, []
                last_round = time.monotonic()
                call = self._db.call_and_keep if self._closing else self._db.call
                await call(self._commit_round, batch, last_round - self._started)
                # A round's cost (the commit, and DuckDB's checkpoint when the store is released) grows with the
                # store's tables: space rounds so that the store thread stays mostly free for page reads (and
                # the file lock for readers), with bigger rounds instead of more of them.
                gap = min(max(self._interval_s, (time.monotonic() - last_round) / self._duty),
                          MAX_COMMIT_GAP_FACTOR * self._interval_s)
            if self._closing and not self._queue:
                return
            if self._queue:
                self._wakeup.set()

    async def close(self) -> None:
        self._closing = True
        self._hurry.set()
        self._wakeup.set()
        await self._task


_gc_lock = threading.Lock()
_gc_sending = 0  # send phases in progress in this process (the outermost sets the collector up, and back)


@contextlib.contextmanager
def long_lived_objects_frozen() -> Iterator[None]:
    """The send phase's garbage collection: every object alive when it starts (modules, pydantic's schemas,
    the plan, DuckDB's and httpcore's objects: tens of thousands) is moved out of the collector's reach
    (``gc.freeze``). Otherwise each full collection during the send phase walks all of them again (about 60 ms of
    CPU each on this project's machine, for a few hundred objects freed). Reference cycles made while sending are
    still collected, at the usual thresholds: collecting the youngest generation less often (every 10,000
    allocations rather than 700) saved a little more CPU but raised the peak RSS of 100,000 instances by about
    25 MB (bench/run_bench.py (b): 310-324 MB against 292-295 MB), past its 300 MB target. What was frozen is
    handed back to the collector when the phase ends."""
    global _gc_sending
    with _gc_lock:
        _gc_sending += 1
        outermost = _gc_sending == 1
        if outermost:
            gc.freeze()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_sending -= 1
            if outermost:
                gc.unfreeze()


def _load_page(store: Store, run_id: str, benchmark: str, after_rank: int, limit: int,
               errors_only: bool) -> tuple[list[tuple[PendingItem, Instance]], int | None]:
    page, last_rank = runs_db.pending_page(store, run_id, benchmark, after_rank=after_rank, limit=limit,
                                           errors_only=errors_only)
    by_fp: dict[str, list[str]] = {}
    for item in page:
        by_fp.setdefault(item.fingerprint, []).append(item.instance_id)
    instances: dict[str, Instance] = {}
    for fingerprint, ids in by_fp.items():
        instances.update(store.get_instances(benchmark, fingerprint, ids))
    return [(item, instances[item.instance_id]) for item in page], last_rank


async def execute_run(store: Store, client: ChatClient, run: RunInfo, *, specs: Mapping[str, BenchmarkSpec],
                      settings: ExecutionSettings, progress: RunProgress, session_id: str | None = None,
                      fitter: PromptFitter | None = None, scoring: ScoreAsAnswered | None = None) -> ExecutionReport:
    """Send every pending item of ``run`` (or, with ``errors_only``, every failed one) and commit the outcomes.

    ``specs``: each benchmark's spec as the run uses it (``spec_for_run``); ``fitter``: fits prompts into the
    model's context (None: every prompt is sent as built); ``scoring``: scores the answers it can as they arrive,
    each committed with its answer (``report.scored``)."""
    report = ExecutionReport(session_id=session_id or uuid.uuid4().hex[:12])
    for benchmark in run.benchmarks:
        total, answered, errors = runs_db.item_counts(store, run.run_id, benchmark)
        if settings.errors_only:
            progress.add(benchmark, errors, 0)
        else:
            progress.add(benchmark, total, answered + errors, errors)
    limiter = AdaptiveLimiter(settings.concurrency, initial=settings.initial_concurrency)
    progress.concurrency = limiter.limit
    # The first page is read from the store as planning left it attached, and released after it, on the store thread:
    # from then on the store is attached only for a page read or a commit round. Released here, the checkpoint of
    # the plan DuckDB makes on release (about 25 ms) and the attach again came before the first request.
    db = StoreThread(release=store)
    started = time.monotonic()
    cpu_started = time.process_time()
    committer = GroupCommitter(db, store, run.run_id, report.session_id, replace_errors=settings.errors_only,
                               max_batch=settings.commit_batch, started=started,
                               interval_s=settings.commit_interval_s, duty=settings.commit_duty)
    tasks: set[asyncio.Task[None]] = set()
    max_alive = 2 * settings.concurrency + 64  # requests backing off hold no slot; bound them anyway
    room = asyncio.Event()

    async def send(instance: Instance, request: InferenceRequest, truncated: Truncated | None = None, *,
                   slot_held: bool = True) -> None:
        result = await client.complete(request, max_retries=settings.max_retries, gate=limiter,
                                       slot_held=slot_held, backoff_base_s=settings.backoff_base_s,
                                       backoff_cap_s=settings.backoff_cap_s)
        record(instance, request, result, truncated)

    async def fit_and_send(spec: BenchmarkSpec, instance: Instance, request: InferenceRequest) -> None:
        assert fitter is not None
        try:
            fitted, truncated = await fitter.fit(spec, instance, request)
        except RequestFailed as failure:  # prompt_too_long, or the tokenizer failed: recorded, never sent
            record(instance, request, InferenceResult(error=failure.category, attempts=0), None)
            return
        await send(instance, fitted, truncated, slot_held=False)  # the slot is taken once the prompt is ready

    def record(instance: Instance, request: InferenceRequest, result: InferenceResult,
               truncated: Truncated | None) -> None:
        # Scored here, while the instance is at hand (a few tens of microseconds for these metrics), and committed
        # with the answer in one transaction.
        scores = () if scoring is None else scoring.rows(request.benchmark, instance, result.output, result.error)
        committer.submit(Outcome(request, result, truncated, scores))
        report.sent += 1
        report.ok += int(result.ok)
        report.errors += int(not result.ok)
        report.prompt_tokens += result.prompt_tokens or 0
        report.completion_tokens += result.completion_tokens or 0
        progress.concurrency = limiter.limit
        progress.advance(request.benchmark, error=not result.ok, tokens=result.completion_tokens or 0)

    failures: list[BaseException] = []

    def done(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failures.append(task.exception())  # type: ignore[arg-type]
        room.set()

    # Pages are read ahead (``prefetch_pages``, across benchmarks) by their own task: a page read queued behind a
    # commit round (and its checkpoint) on the store thread must not leave the limiter's slots empty.
    # The reader holds one read page while the queue is full: ``prefetch_pages`` ahead in all (memory: a page each).
    pages: asyncio.Queue[tuple[str, list[tuple[PendingItem, Instance]]] | BaseException | None] = asyncio.Queue(
        maxsize=max(1, settings.prefetch_pages - 1))

    async def read_pages() -> None:
        try:
            for benchmark in run.benchmarks:
                after: int | None = -1
                while after is not None:
                    page, after = await db.call(_load_page, store, run.run_id, benchmark, after,
                                                settings.page_size, settings.errors_only)
                    if page:
                        await pages.put((benchmark, page))
            await pages.put(None)
        except Exception as exc:  # the sender raises it
            await pages.put(exc)

    reader = asyncio.create_task(read_pages())
    try:
        first_of: dict[str, BenchmarkSpec] = {}
        while (next_page := await pages.get()) is not None:
            if isinstance(next_page, BaseException):
                raise next_page
            benchmark, page = next_page
            spec = first_of.get(benchmark)
            if spec is None:
                spec = first_of[benchmark] = specs[benchmark]
                progress.start(benchmark)
            for _, instance in page:
                request = build_request(spec, instance, seed=run.seed)
                while len(tasks) >= max_alive:
                    room.clear()
                    await room.wait()
                if fitter is not None and not fitter.fits_unchecked(request):
                    task = asyncio.create_task(fit_and_send(spec, instance, request))
                else:
                    await limiter.acquire()
                    task = asyncio.create_task(send(instance, request))
                tasks.add(task)
                task.add_done_callback(done)
                if failures:  # a failed commit stops the run at once, not after the last page
                    raise failures[0]
                committer.check()
        committer.drain()
        while tasks:
            await asyncio.gather(*list(tasks))
        if failures:  # a task that failed after the last page was read (its done callback dropped it from tasks)
            raise failures[0]
        await committer.close()
    except BaseException:
        reader.cancel()
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*list(tasks), return_exceptions=True)
        with contextlib.suppress(BaseException):
            await committer.close()  # what was answered is saved (a failed commit stays the error raised)
        raise
    finally:
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        db.close()
        report.wall_s = time.monotonic() - started
        report.cpu_s = time.process_time() - cpu_started
        report.peak_concurrency = limiter.peak_limit
        report.final_concurrency = limiter.limit
        report.concurrency_history = list(limiter.history)
        report.endpoints = client.pool.summaries()
        if fitter is not None:
            report.counted, report.truncated = fitter.counted, fitter.truncated
        if scoring is not None:
            report.scored = scoring.scored()
    return report
