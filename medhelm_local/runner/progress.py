"""Run progress: rich bars per benchmark on a terminal; periodic structured lines otherwise (Kubernetes logs).

Both show done/total, errors, completion tokens per second and an ETA; never any text of a request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from medhelm_local.console import is_tty, stderr_console
from medhelm_local.logs import get_logger

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

log = get_logger(__name__)


@dataclass
class BenchmarkCounts:
    total: int
    done: int
    errors: int = 0
    tokens: int = 0
    session_done: int = 0
    started: float = field(default_factory=time.monotonic)

    def rate(self, now: float) -> tuple[float, float]:
        """(instances/s, completion tokens/s) over this session."""
        elapsed = max(1e-9, now - self.started)
        return self.session_done / elapsed, self.tokens / elapsed

    def eta_s(self, now: float) -> float | None:
        per_s, _ = self.rate(now)
        remaining = self.total - self.done
        return remaining / per_s if per_s > 0 else None


class RunProgress:
    def __init__(self, run_id: str, *, interval_s: float = 10.0, enabled: bool = True) -> None:
        self.run_id = run_id
        self.tty = is_tty() and enabled
        self.enabled = enabled
        self.interval_s = interval_s
        self.concurrency: int | None = None
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self.counts: dict[str, BenchmarkCounts] = {}
        self._last_line = time.monotonic()

    def __enter__(self) -> RunProgress:
        if self.tty:
            # rich's progress (about 20 ms of imports) only where bars are drawn: not for `run --json` or a pod's logs
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("errors {task.fields[errors]}"), TextColumn("{task.fields[tps]} tok/s"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=stderr_console(),
            )
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
        elif self.enabled and self.counts:
            self._lines()

    def add(self, benchmark: str, total: int, done: int, errors: int = 0) -> None:
        self.counts[benchmark] = BenchmarkCounts(total=total, done=done, errors=errors)
        if self._progress is not None:
            self._tasks[benchmark] = self._progress.add_task(benchmark, total=total, completed=done, errors=errors,
                                                             tps="0.0")

    def start(self, benchmark: str) -> None:
        """The benchmark's first request goes out now: rates are measured from here."""
        self.counts[benchmark].started = time.monotonic()

    def advance(self, benchmark: str, *, error: bool, tokens: int = 0, replaced_error: bool = False) -> None:
        counts = self.counts[benchmark]
        if not replaced_error:
            counts.done += 1
        counts.session_done += 1
        counts.errors += int(error) - int(replaced_error)
        counts.tokens += tokens
        now = time.monotonic()
        if self._progress is not None:
            _, tps = counts.rate(now)
            self._progress.update(self._tasks[benchmark], completed=counts.done, errors=counts.errors,
                                  tps=f"{tps:.1f}")
        elif self.enabled and now - self._last_line >= self.interval_s:
            self._lines()

    def _lines(self) -> None:
        now = time.monotonic()
        self._last_line = now
        for benchmark, counts in self.counts.items():
            per_s, tps = counts.rate(now)
            eta = counts.eta_s(now)
            log.info("run.progress", run_id=self.run_id, benchmark=benchmark, done=counts.done, total=counts.total,
                     errors=counts.errors, per_s=round(per_s, 2), tokens_per_s=round(tps, 1),
                     eta_s=None if eta is None else round(eta, 1), concurrency=self.concurrency)
