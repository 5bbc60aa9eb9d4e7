"""The demo: a throwaway home, a synthetic extract, bundled PubMedQA and MedicationQA samples, the embedded model.

MedicationQA is open-ended: it is scored by the LLM jury, here the embedded model judging its own answers (the
only model the demo has), with the structured-output shape llama.cpp accepts. That exercises the whole jury path
offline; the ratings of a 135M model mean nothing clinically.
"""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from medhelm_local.analysis.board import Board, load_board
from medhelm_local.analysis.leaderboard import WinRule
from medhelm_local.analysis.stats import DEFAULT_RESAMPLES
from medhelm_local.application.datasets import register_file
from medhelm_local.application.evaluation import EvaluationRequest, Mode, RunOutcome, Selection, Sending, evaluate
from medhelm_local.audit import audit_event
from medhelm_local.context import AppContext
from medhelm_local.demo.medicationqa import write_sample_xlsx
from medhelm_local.demo.synthetic import hospice_extract_csv
from medhelm_local.export.report import aggregate_report, write_report
from medhelm_local.home import Home
from medhelm_local.home.config import EMBEDDED_MODEL_NAME
from medhelm_local.home.layout import atomic_write
from medhelm_local.prompts.styles import DEFAULT_STYLE
from medhelm_local.store.judgments import judge_failure_rates

DEMO_BENCHMARKS = ("pubmedqa", "hospice_referral", "medication_qa")
JURY_BENCHMARK = "medication_qa"
# The judge prompt (rubric, question, the model's answer of up to 512 tokens, the reference) plus the judge's
# reply do not fit SmolLM2's default 2048-token window; the model was trained with 8192.
DEMO_CONTEXT_LENGTH = 4096
SMOKE_TEST_NOTE = (
    "The embedded model (SmolLM2-135M-Instruct, 4-bit, CPU) is a smoke-test model: it proves the pipeline "
    "works end to end offline. Its scores, and its jury ratings of its own MedicationQA answers, are near chance "
    "and say nothing about clinical usefulness."
)


def new_demo_home(parent: Path | None = None) -> Path:
    return Path(tempfile.mkdtemp(prefix="medhelm-demo-", dir=parent))


def pubmedqa_sample_path() -> Path:
    return Path(str(resources.files("medhelm_local.demo") / "data" / "pubmedqa_sample.json"))


def prepare(app_ctx: AppContext) -> dict[str, int]:
    """Init the home (the embedded model as the jury's judge) and register the demo datasets; returns instance
    counts."""
    home: Home = app_ctx.home
    home.init()
    config = home.config.model_copy(deep=True)
    config.models = [m.model_copy(update={"context_length": DEMO_CONTEXT_LENGTH}) if m.name == EMBEDDED_MODEL_NAME
                     else m for m in config.models]
    config.judges = [EMBEDDED_MODEL_NAME]
    home.save_config(config)
    audit_event(home, app_ctx.actor, "appliance.init", role="it-admin", purpose="demo")
    extract = home.root / "extracts" / "synthetic_hospice_notes.csv"
    atomic_write(extract, hospice_extract_csv().encode("utf-8"))
    medication_qa = write_sample_xlsx(home.root / "extracts" / "medicationqa_sample.xlsx")
    sources = (("pubmedqa", pubmedqa_sample_path()), ("hospice_referral", extract), (JURY_BENCHMARK, medication_qa))
    specs = app_ctx.specs
    return {benchmark: register_file(app_ctx, specs.get(benchmark), path).instances for benchmark, path in sources}


def evaluate_demo(app_ctx: AppContext, instances: int, *, show_progress: bool = True) -> RunOutcome:
    """The demo benchmarks on the embedded model: always a new run, ``instances`` per benchmark, 2 in flight."""
    return evaluate(app_ctx, EvaluationRequest(
        selection=Selection(model=EMBEDDED_MODEL_NAME, benchmarks=list(DEMO_BENCHMARKS), max_instances=instances),
        sending=Sending(concurrency=2, show_progress=show_progress),
        mode=Mode.new(always_new=True),
    ))


def jury_summary(app_ctx: AppContext, run_id: str) -> list[dict[str, Any]]:
    """Per judge of the run's jury-scored benchmark: judgements, valid ones, failed requests, the structured-output
    shape sent (counts and names only)."""
    with app_ctx.open_store() as store:
        rates = judge_failure_rates(store, run_id, JURY_BENCHMARK)
    return [{"judge": r.judge, "benchmark": r.benchmark, "judgments": r.total, "valid": r.ok,
             "request_failed": r.request_failed, "invalid_reply": r.invalid_reply,
             "structured_output": r.output_shapes} for r in rates]


def finish(app_ctx: AppContext) -> tuple[Board, Path]:
    """The leaderboard as `medhelm-local leaderboard` shows it by default (the same assembly: costs, comparability,
    prompt style, CIs), and the aggregate-only report of its rows."""
    home = app_ctx.home
    board = load_board(app_ctx.open_store(read_only=True), app_ctx.specs, home.config, prompt_style=DEFAULT_STYLE,
                       rule=WinRule.PAPER, resamples=DEFAULT_RESAMPLES, seed=0)
    report_path = write_report(aggregate_report(board.rows, note=SMOKE_TEST_NOTE),
                               home.reports_dir / "demo-aggregate-report.json")
    audit_event(home, app_ctx.actor, "report.write", role="informatics", report=report_path.name,
                kind="aggregate")
    return board, report_path


__all__ = ["DEMO_BENCHMARKS", "EMBEDDED_MODEL_NAME", "SMOKE_TEST_NOTE", "evaluate_demo", "finish", "jury_summary",
           "new_demo_home", "prepare"]
