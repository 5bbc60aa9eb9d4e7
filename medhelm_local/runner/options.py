"""What one evaluation is asked to do, split by concern:

* :class:`Selection`: what to evaluate (model, benchmarks, sample, seed, send order, prompt style);
* :class:`Sending`: how to send (concurrency, timeouts, retries, progress display);
* :class:`Mode`: which run it adds to: a new one (or the unfinished run with the same plan), an existing run
  resumed or its errors retried, or one shard of a run split across pods.

The CLI builds them from its flags (``Mode.from_flags`` refuses contradictory ones); library callers (the demo,
the bench, tests) build them directly and hand them to ``application.evaluation.evaluate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from medhelm_local.errors import BadInputError

ModeKind = Literal["new", "resume", "retry_errors", "shard"]


@dataclass(frozen=True)
class Selection:
    """What to evaluate. ``model`` and ``benchmarks`` are required for a new run or a shard; on resume or retry
    the run's own plan is sent: each of these given must be the run's own (refused otherwise, never ignored)."""

    model: str | None = None
    benchmarks: list[str] | None = None
    max_instances: int | None = None
    seed: int | None = None  # None: the config's runner.seed
    order: str | None = None  # None: "prefix"
    prompt_style: str | None = None  # None: the default style for a new run, the run's own on resume


@dataclass(frozen=True)
class Sending:
    """How to send: caps and timing of the requests, and whether progress bars are shown.

    An option left None is the run's own when the invocation adds to an existing run (resume, retry of its
    errors, shard: what the run was created with, or last given again), else the default said below; the first
    four fields are kept with the run (``runner.session.SENT_WITH``)."""

    concurrency: int | None = None  # None: the config's runner.max_concurrency (also the ceiling)
    # where the adaptive limiter starts (None: the cap for vLLM, which batches up to it; half the cap, at least
    # 64, for other servers)
    initial_concurrency: int | None = None
    request_timeout_s: float | None = None  # None: the model's timeout_s
    max_retries: int | None = None  # None: the config's runner.max_retries
    backoff_base_s: float = 0.5
    show_progress: bool = True


@dataclass(frozen=True)
class Mode:
    """Which run the invocation adds to.

    * ``new``: plan the run; resume the unfinished run with the same plan unless ``always_new`` (``--new-run``);
      ``run_id`` names the run to create (or resume, if it exists with the same plan);
    * ``resume`` / ``retry_errors``: the existing run ``run_id`` (send what is missing / re-send its errors);
    * ``shard``: slice ``shard = (index, count)`` of the run ``run_id`` (default: derived from the plan key).
    """

    kind: ModeKind = "new"
    run_id: str | None = None
    always_new: bool = False
    shard: tuple[int, int] | None = None

    @classmethod
    def new(cls, run_id: str | None = None, *, always_new: bool = False) -> Mode:
        return cls("new", run_id, always_new=always_new)

    @classmethod
    def resume(cls, run_id: str) -> Mode:
        return cls("resume", run_id)

    @classmethod
    def retry_errors(cls, run_id: str) -> Mode:
        return cls("retry_errors", run_id)

    @classmethod
    def of_shard(cls, index: int, count: int, run_id: str | None = None) -> Mode:
        if count < 1 or not 0 <= index < count:
            raise BadInputError(f"--shard: index must be in 0..N-1 and N >= 1, got {index}/{count}")
        return cls("shard", run_id, shard=(index, count))

    @classmethod
    def from_flags(cls, *, resume: str | None = None, retry_errors: str | None = None, run_id: str | None = None,
                   shard: tuple[int, int] | None = None, new_run: bool = False) -> Mode:
        """The mode that ``run``'s flags ask for; contradictory flags are refused (exit 2)."""
        if shard is not None:
            if resume or retry_errors or new_run:
                raise BadInputError("--shard: use --run-id (or nothing) to name the run, not "
                                    "--resume/--retry-errors/--new-run")
            return cls.of_shard(*shard, run_id=run_id)
        if resume and retry_errors:
            raise BadInputError("--resume and --retry-errors: give one of them")
        named = resume or retry_errors
        if named and (new_run or (run_id is not None and run_id != named)):
            raise BadInputError("--resume/--retry-errors name the run: --new-run and a different --run-id "
                                "do not apply")
        if resume:
            return cls.resume(resume)
        if retry_errors:
            return cls.retry_errors(retry_errors)
        return cls.new(run_id, always_new=new_run)

    @property
    def shard_label(self) -> str | None:
        return None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}"


@dataclass(frozen=True)
class EvaluationRequest:
    """One evaluation: what, how, which run; ``score``: score (and finish) the run once every item is answered
    (False: inference only, the run ends ``inferred``)."""

    selection: Selection
    sending: Sending = Sending()
    mode: Mode = Mode()
    score: bool = True
