"""The demo: a throwaway home, a synthetic extract, a bundled PubMedQA sample, the embedded model."""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path

from medhelm_local.analysis.aggregate import latest_scores
from medhelm_local.analysis.leaderboard import ModelRow, build_leaderboard
from medhelm_local.audit import audit_event
from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.context import AppContext
from medhelm_local.demo.synthetic import hospice_extract_csv
from medhelm_local.export.report import aggregate_report, write_report
from medhelm_local.home import Home
from medhelm_local.home.config import EMBEDDED_MODEL_NAME
from medhelm_local.home.layout import atomic_write
from medhelm_local.store import Store
from medhelm_local.store.datasets import register_file

DEMO_BENCHMARKS = ("pubmedqa", "hospice_referral")
SMOKE_TEST_NOTE = (
    "The embedded model (SmolLM2-135M-Instruct, 4-bit, CPU) is a smoke-test model: it proves the pipeline "
    "works end to end offline. Its scores are near chance and say nothing about clinical usefulness."
)


def new_demo_home(parent: Path | None = None) -> Path:
    return Path(tempfile.mkdtemp(prefix="medhelm-demo-", dir=parent))


def pubmedqa_sample_path() -> Path:
    return Path(str(resources.files("medhelm_local.demo") / "data" / "pubmedqa_sample.json"))


def prepare(app_ctx: AppContext) -> dict[str, int]:
    """Init the home and register both demo datasets; returns instance counts."""
    home: Home = app_ctx.home
    home.init()
    audit_event(home, app_ctx.actor, "appliance.init", role="it-admin", purpose="demo")
    extract = home.root / "extracts" / "synthetic_hospice_notes.csv"
    atomic_write(extract, hospice_extract_csv().encode("utf-8"))
    sources = (("pubmedqa", pubmedqa_sample_path()), ("hospice_referral", extract))
    return {benchmark: register_file(app_ctx, get_spec(benchmark), path).instances for benchmark, path in sources}


def finish(app_ctx: AppContext) -> tuple[list[ModelRow], Path]:
    home = app_ctx.home
    with Store.open(home) as store:
        rows = build_leaderboard(latest_scores(store))
    report_path = write_report(aggregate_report(rows, note=SMOKE_TEST_NOTE),
                               home.reports_dir / "demo-aggregate-report.json")
    audit_event(home, app_ctx.actor, "report.write", role="informatics", report=report_path.name,
                kind="aggregate")
    return rows, report_path


__all__ = ["DEMO_BENCHMARKS", "EMBEDDED_MODEL_NAME", "SMOKE_TEST_NOTE", "finish", "new_demo_home", "prepare"]
