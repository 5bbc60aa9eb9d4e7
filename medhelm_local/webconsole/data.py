"""Every store read (and the one store write, a clinician's rating) of the web console, in one place.

The console opens the store read-only with a short, bounded wait for the lock (``console.read_wait_s``): while
a run holds it for longer, the page says a run is in progress instead of failing. Nothing here logs or raises
with patient text; the patient-level functions are the only ones that return it, and their callers audit the
view.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from medhelm_local.analysis.aggregate import (
    InstanceSeries,
)
from medhelm_local.analysis.leaderboard import (
    BenchmarkMDE,
    ModelRow,
    PairwiseDifference,
    WinRule,
)
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.deployment import send_again_hint
from medhelm_local.errors import MedhelmError, NotFoundError
from medhelm_local.home import Home
from medhelm_local.home.keys import load_data_key
from medhelm_local.prompts.styles import run_prompt_style, spec_for_run
from medhelm_local.records import Truncated
from medhelm_local.runner.fitting import sent_request
from medhelm_local.runner.liveness import run_live, status_text
from medhelm_local.runner.manifest import manifest_sha256
from medhelm_local.store import connection
from medhelm_local.store import console as console_db
from medhelm_local.store import runs as runs_db
from medhelm_local.store.connection import StoreError
from medhelm_local.store.judgments import get_judgments
from medhelm_local.store.ratings import ClinicianRating, RatingOutcome, list_ratings, record_rating
from medhelm_local.store.store import DatasetInfo, RunInfo, Store


class RunInProgress(MedhelmError):
    """The store stayed locked by another process (a run, a registration) for the whole wait."""

    exit_code = 1


class NoStoreYet(MedhelmError):
    """Nothing was registered or run yet: there is no store file."""

    exit_code = 1


BUSY = "another medhelm-local process holds it"  # the store's own message when its lock wait ran out


def _open(home: Home, path: Path, *, read_only: bool) -> Store:
    """Open the store with the console's own, short lock wait (``console.read_wait_s``): a run holding the store
    for longer is said, not waited for. The store attaches its file around each write transaction, so the console
    gets in between a run's writes, with exactly its own wait."""
    key = load_data_key(home.keys_dir)
    try:
        database = connection.EncryptedDatabase(path, key, read_only=read_only, settings=home.config.store)
        try:
            database.attach(wait_s=home.config.console.read_wait_s)
        except BaseException:
            database.close()
            raise
        return Store(lambda: database, path)
    except StoreError as exc:
        if BUSY in str(exc):
            raise RunInProgress("a run (or a registration) is writing to the store right now") from None
        raise


@contextmanager
def reading(home: Home) -> Iterator[Store]:
    """The store, read-only; :class:`RunInProgress` when it stays locked, :class:`NoStoreYet` when absent."""
    path = home.store_path
    if not path.exists():
        raise NoStoreYet("no store yet: register a dataset and run an evaluation first")
    store = _open(home, path, read_only=True)
    if not store.schema_is_current():  # an upgrade's first reader: migrated first, as every reader does
        store.close()
        with writing(home):
            pass
        store = _open(home, path, read_only=True)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def writing(home: Home) -> Iterator[Store]:
    """The store for a short write (a rating), with the same bounded wait."""
    path = home.store_path
    if not path.exists():
        raise NoStoreYet("no store yet")
    store = _open(home, path, read_only=False)
    try:
        store._migrate()  # the whole schema, the console's own table (schema_console.sql) with it
        yield store
    finally:
        store.close()


# -- informatics: aggregates ----------------------------------------------------------------------------------


@dataclass
class LeaderboardView:
    rows: list[ModelRow]
    mdes: dict[str, BenchmarkMDE]
    prompt_style: str
    rule: WinRule
    other_styles: dict[str, int]
    pairwise: list[PairwiseDifference] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    series: list[InstanceSeries] = field(default_factory=list)  # per-instance values: the summaries' CIs
    comparability: list[str] = field(default_factory=list)  # the CLI's sentences on unlike or outdated runs
    newer_runs: list[str] = field(default_factory=list)  # the CLI's sentences on newer runs not shown
    item_sets: list[str] = field(default_factory=list)  # the CLI's sentences on scores over different items


def leaderboard(home: Home, *, prompt_style: str, rule: WinRule, resamples: int = DEFAULT_RESAMPLES,
                seed: int = 0) -> LeaderboardView:
    """The CLI leaderboard's numbers (the same assembly, the same bootstrap seed)."""
    from medhelm_local.analysis.board import load_board
    from medhelm_local.analysis.comparability import comparability_lines
    from medhelm_local.analysis.leaderboard import item_set_lines, newer_run_lines

    specs = SpecRegistry(home.root)
    board = load_board(reading(home), specs, home.config, prompt_style=prompt_style, rule=rule, resamples=resamples,
                       seed=seed, home=home)
    rows = board.rows
    return LeaderboardView(rows=rows, mdes=board.mdes, prompt_style=prompt_style, rule=rule,
                           other_styles=board.other_styles, pairwise=[d for d in board.pairwise if d.model < d.rival],
                           benchmarks=sorted({b for r in rows for b in r.benchmarks}),
                           categories=sorted({c for r in rows for c in r.categories}), series=board.series,
                           comparability=comparability_lines(rows), newer_runs=newer_run_lines(rows),
                           item_sets=item_set_lines(rows))


@dataclass
class BenchmarkProgress:
    benchmark: str
    planned: int
    answered: int  # items with an answer
    errors: int  # items whose request failed

    @property
    def done(self) -> int:
        return self.answered + self.errors


@dataclass
class RunSummary:
    run: RunInfo
    prompt_style: str
    progress: list[BenchmarkProgress]
    errors_by_category: dict[str, dict[str, int]]
    live: bool | None  # runner.liveness.run_live: whether a process is sending a `running` run
    status_text: str  # runner.liveness.status_text: the status as shown

    @property
    def badge(self) -> str:
        """The status a page's badge (and its reloading) goes by: a run no process sends counts as interrupted."""
        return "interrupted" if self.live is False else self.run.status

    @property
    def resume_hint(self) -> str:
        return send_again_hint(self.run.run_id)

    @property
    def retry_hint(self) -> str:
        return send_again_hint(self.run.run_id, "--retry-errors")

    @property
    def planned(self) -> int:
        return sum(p.planned for p in self.progress)

    @property
    def answered(self) -> int:
        return sum(p.answered for p in self.progress)

    @property
    def errors(self) -> int:
        return sum(p.errors for p in self.progress)

    @property
    def done(self) -> int:
        return self.answered + self.errors


def _summary(home: Home, store: Store, run: RunInfo) -> RunSummary:
    progress = [BenchmarkProgress(b, *runs_db.item_counts(store, run.run_id, b)) for b in run.benchmarks]
    live = run_live(home, store, run)
    return RunSummary(run=run, prompt_style=run_prompt_style(run.manifest), progress=progress,
                      errors_by_category=runs_db.errors_by_category(store, run.run_id),
                      live=live, status_text=status_text(home, store, run, live))


def runs(home: Home) -> list[RunSummary]:
    """Every run, newest first, with progress and failures by category."""
    with reading(home) as store:
        return [_summary(home, store, r) for r in reversed(store.list_runs())]


@dataclass
class RunDetail:
    summary: RunSummary
    manifest_sha256: str
    sessions: list[dict[str, Any]]
    truncated: dict[str, tuple[int, int]]  # benchmark -> (responses cut at the token limit, responses)
    scores: dict[str, dict[str, Any]]  # benchmark -> metric, score, n, n_failed


def run_detail(home: Home, run_id: str) -> RunDetail:
    from medhelm_local.analysis.aggregate import benchmark_score

    specs = SpecRegistry(home.root)
    with reading(home) as store:
        run = store.get_run(run_id)
        if run is None:
            raise NotFoundError(f"no run {run_id!r}")
        truncated = console_db.truncation_by_benchmark(store, run_id)
        scores = {}
        for benchmark in run.benchmarks:
            s = benchmark_score(store, specs, run_id, run.model, benchmark)
            scores[benchmark] = {"metric": s.metric, "score": s.score, "n": s.n, "n_failed": s.n_failed}
        return RunDetail(summary=_summary(home, store, run), manifest_sha256=manifest_sha256(run.manifest),
                         sessions=runs_db.sessions(store, run_id), truncated=truncated, scores=scores)


@dataclass
class BenchmarkDetail:
    benchmark: str
    datasets: list[DatasetInfo]
    results: list[dict[str, Any]]  # model, run_id, score, n, n_failed, metric


def benchmark_detail(home: Home, benchmark: str) -> BenchmarkDetail:
    from medhelm_local.analysis.aggregate import benchmark_score

    specs = SpecRegistry(home.root)
    specs.get(benchmark)  # unknown benchmark: NotFoundError
    if not home.store_path.exists():  # nothing registered or run yet: the benchmark itself, nothing on it
        return BenchmarkDetail(benchmark=benchmark, datasets=[], results=[])
    with reading(home) as store:
        datasets = [d for d in store.list_datasets() if d.benchmark == benchmark]
        results = []
        for run in reversed(store.list_runs()):
            if benchmark in run.benchmarks and run.status == "finished":
                s = benchmark_score(store, specs, run.run_id, run.model, benchmark)
                results.append({"model": run.model, "run_id": run.run_id, "metric": s.metric, "score": s.score,
                                "n": s.n, "n_failed": s.n_failed, "prompt_style": run_prompt_style(run.manifest)})
    return BenchmarkDetail(benchmark=benchmark, datasets=datasets, results=results)


def registered_datasets(home: Home) -> dict[str, DatasetInfo]:
    """The current registered dataset version of each benchmark (none before the first registration)."""
    try:
        with reading(home) as store:
            datasets = store.list_datasets()  # newest first within a benchmark
    except NoStoreYet:
        return {}
    current: dict[str, DatasetInfo] = {}
    for dataset in datasets:
        current.setdefault(dataset.benchmark, dataset)
    return current


# -- informatics: patient-level (the caller audits every view) ------------------------------------------------


@dataclass
class InstanceRow:
    instance_id: str
    messages: list[dict[str, str]]
    output: str | None
    expected: list[str]  # the gold answer the score compares with: its label, else its references (none: no gold)
    error: str | None
    finish_reason: str | None
    score: float | None
    judge_ratings: dict[str, dict[str, int]]  # judge -> criterion -> rating
    judge_errors: dict[str, str]  # judge -> failure category
    position: int  # its place in its registered dataset: what the audit trail names (an id may be PHI)
    # How the prompt shown was obtained: "stored" (a request stored whole, before hashes only), "rebuilt" (from the
    # run's spec, the instance and its recorded cut; its hash is the one sent), "differs" (rebuilt, but not what
    # was sent: the prompt-building code changed since the run), "none" (not sent yet)
    prompt_source: str = "none"
    cut: Truncated | None = None  # how the long field was cut to fit the model's context (counts, no text)


PAGE_SIZE = 20


def instances(home: Home, run_id: str, benchmark: str, *, page: int = 0, failures_only: bool = False
              ) -> tuple[list[InstanceRow], int]:
    """One page of a run's items on one benchmark (prompt, response, score, judge ratings) and the item count."""
    specs = SpecRegistry(home.root)
    with reading(home) as store:
        run = store.get_run(run_id)
        if run is None or benchmark not in run.benchmarks:
            raise NotFoundError(f"run {run_id!r} has no benchmark {benchmark!r}")
        spec = spec_for_run(benchmark, run.manifest, specs)  # the run's own, frozen when it was created
        rows, total = console_db.item_page(store, run_id, benchmark, spec.metric, failures_only=failures_only,
                                           limit=PAGE_SIZE, offset=page * PAGE_SIZE)
        wanted: dict[str, list[str]] = {}  # every row's instance: its gold answer, and its prompt where rebuilt
        for row in rows:
            wanted.setdefault(row.fingerprint, []).append(row.instance_id)
        by_id = {iid: instance for fingerprint, ids in wanted.items()
                 for iid, instance in store.get_instances(benchmark, fingerprint, ids).items()}
        judgments: dict[str, dict[str, Any]] = {}
        for j in get_judgments(store, run_id, benchmark):
            judgments.setdefault(j.instance_id, {})[j.judge] = j
    out = []
    for row in rows:
        messages: list[dict[str, Any]] = []
        source = "none"
        if row.request is not None:
            messages, source = (json.loads(row.request) or {}).get("messages", []), "stored"
        elif row.request_hash is not None and row.instance_id in by_id:
            request = sent_request(spec, by_id[row.instance_id], run.seed, row.cut)
            messages = [m.model_dump() for m in request.messages]
            source = "rebuilt" if request.digest() == row.request_hash else "differs"
        iid = row.instance_id
        instance = by_id.get(iid)
        expected = ([] if instance is None else [instance.label] if instance.label is not None
                    else list(instance.references))
        ratings = {judge: dict(j.ratings) for judge, j in judgments.get(iid, {}).items() if j.ratings}
        errors = {judge: str(j.error or j.status) for judge, j in judgments.get(iid, {}).items() if not j.ratings}
        out.append(InstanceRow(instance_id=iid, messages=[{"role": str(m.get("role")),
                                                           "content": str(m.get("content"))} for m in messages],
                               output=row.output, expected=expected, error=row.error,
                               finish_reason=row.finish_reason,
                               score=row.score, judge_ratings=ratings, judge_errors=errors,
                               prompt_source=source, cut=row.cut, position=row.position))
    return out, total


# -- clinicians ----------------------------------------------------------------------------------------------


@dataclass
class RatableResponse:
    run_id: str
    model: str
    benchmark: str
    instance_id: str
    position: int  # its place in its registered dataset: what the audit trail names (an id may be PHI)


def ratable_responses(home: Home) -> list[RatableResponse]:
    """Every answered item of a finished run on a jury-scored (open-ended) benchmark: the sampling frame."""
    from medhelm_local.scoring.jury import is_jury_scored

    specs = SpecRegistry(home.root)
    out = []
    with reading(home) as store:
        for run in store.list_runs():
            if run.status != "finished":
                continue
            for benchmark in run.benchmarks:
                try:
                    if not is_jury_scored(specs.get(benchmark)):
                        continue
                except NotFoundError:
                    continue
                for iid, position in console_db.answered_items(store, run.run_id, benchmark):
                    out.append(RatableResponse(run.run_id, run.model, benchmark, iid, position))
    return out


def clinician_ratings(home: Home) -> list[ClinicianRating]:
    with reading(home) as store:
        return list_ratings(store)


@dataclass
class ItemText:
    question: str
    response: str


def item_text(home: Home, run_id: str, benchmark: str, instance_id: str) -> ItemText:
    """What the jury saw of one item: the question and the model's response (patient-level: audit the view)."""
    from medhelm_local.prompts.build import judge_question

    specs = SpecRegistry(home.root)
    spec = specs.get(benchmark)
    with reading(home) as store:
        item = console_db.answered_item(store, run_id, benchmark, instance_id)
        if item is None:
            raise NotFoundError("item not found")
        fingerprint, output = item
        instance = store.get_instances(benchmark, fingerprint, [instance_id]).get(instance_id)
    if instance is None:
        raise NotFoundError("item not found")
    return ItemText(question=judge_question(spec, instance), response=output)


def save_rating(home: Home, rating: ClinicianRating, raters_per_item: int) -> RatingOutcome:
    with writing(home) as store:
        return record_rating(store, rating, raters_per_item)


# -- IT --------------------------------------------------------------------------------------------------------


@dataclass
class SystemView:
    store_bytes: int | None
    disk_total: int
    disk_free: int
    model_servers: list[dict[str, Any]]
    last_runs: list[RunSummary]
    store_error: str | None = None


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def system(home: Home) -> SystemView:
    usage = shutil.disk_usage(home.root)
    store_bytes = _size(home.store_path)
    wal = _size(home.store_path.with_name(home.store_path.name + ".wal"))
    if store_bytes is not None and wal is not None:
        store_bytes += wal
    view = SystemView(store_bytes=store_bytes, disk_total=usage.total, disk_free=usage.free, model_servers=[],
                      last_runs=[])
    try:
        with reading(home) as store:
            view.model_servers = console_db.model_servers(store, limit=20)
            view.last_runs = [_summary(home, store, r) for r in list(reversed(store.list_runs()))[:10]]
    except (RunInProgress, NoStoreYet) as exc:
        view.store_error = str(exc)
    return view


def last_record_time(records: list[dict[str, Any]], action: str) -> datetime | None:
    """When the trail's last record of ``action`` was written (``audit.checkpoint``: the last signed checkpoint;
    ``audit.checkpoint_export``: the last checkpoint taken off the appliance)."""
    from medhelm_local.audit.report import record_time

    for record in reversed(records):
        if record.get("action") == action:
            return record_time(record)
    return None
