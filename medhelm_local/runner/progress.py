"""Run progress: rich bars on a terminal, periodic structured log lines otherwise (Kubernetes Job logs)."""

from __future__ import annotations

import time
from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from medhelm_local.console import is_tty, stderr
from medhelm_local.logs import get_logger

log = get_logger(__name__)


class RunProgress:
    def __init__(self, run_id: str, *, interval_s: float = 10.0, enabled: bool = True) -> None:
        self.run_id = run_id
        self.tty = is_tty() and enabled
        self.enabled = enabled
        self.interval_s = interval_s
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._counts: dict[str, list[int]] = {}
        self._last_line = 0.0

    def __enter__(self) -> RunProgress:
        if self.tty:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(), console=stderr,
            )
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def add(self, benchmark: str, total: int, done: int) -> None:
        self._counts[benchmark] = [total, done, 0]
        if self._progress is not None:
            self._tasks[benchmark] = self._progress.add_task(benchmark, total=total, completed=done, errors=0)

    def advance(self, benchmark: str, *, error: bool) -> None:
        counts = self._counts[benchmark]
        counts[1] += 1
        counts[2] += int(error)
        if self._progress is not None:
            self._progress.update(self._tasks[benchmark], advance=1, errors=counts[2])
        elif self.enabled and (time.monotonic() - self._last_line >= self.interval_s or counts[1] == counts[0]):
            self._last_line = time.monotonic()
            log.info("run.progress", run_id=self.run_id, benchmark=benchmark, done=counts[1], total=counts[0],
                     errors=counts[2])
