"""An aggregate-only report: per model and benchmark, a score and counts. No instance-level data.

The schema is closed: every field written is named here, and every string is a model name, benchmark id or
metric name from the appliance's own configuration, never a value from a dataset.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medhelm_local import __version__
from medhelm_local.analysis.leaderboard import ModelRow
from medhelm_local.home.layout import atomic_write

REPORT_SCHEMA = "medhelm-local/aggregate-report/v1"


def aggregate_report(rows: list[ModelRow], *, note: str | None = None) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "appliance_version": __version__,
        "note": note,
        "models": [
            {
                "model": r.model,
                "win_rate": _round(r.win_rate),
                "macro_avg": _round(r.macro_avg),
                "benchmarks": [
                    {"benchmark": s.benchmark, "metric": s.metric, "score": _round(s.score), "n": s.n,
                     "n_failed": s.n_failed}
                    for _, s in sorted(r.benchmarks.items())
                ],
            }
            for r in rows
        ],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def write_report(report: dict[str, Any], path: Path) -> Path:
    atomic_write(path, (json.dumps(report, indent=2) + "\n").encode(), mode=0o640)
    return path
