"""The export's win rate is the leaderboard's (``analysis.leaderboard.win_rate``: MedHELM's rule, its tie
tolerance), computed over the published scores only: a suppressed score takes part in no pairing, and scores that
round alike tie."""

from __future__ import annotations

from datetime import datetime

from medhelm_local.analysis.leaderboard import build_leaderboard
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.export.aggregates import RawCell, RawExport, RawModelUsage, RawRun, publish
from medhelm_local.export.policy import ExportPolicy
from medhelm_local.records import BenchmarkScore

# model -> benchmark -> (score, scored instances); fewer than the minimum cell size (10): suppressed
PLAN = {
    "A": {"pubmedqa": (0.5004, 40), "medqa": (0.6, 40)},
    "B": {"pubmedqa": (0.4996, 40), "medqa": (0.95, 7)},  # 0.500 as A's, published; medqa suppressed
    "C": {"pubmedqa": (0.3, 40), "medqa": (0.9, 40)},
    "D": {"medication_qa": (0.7, 40)},  # no rival on its one benchmark
    "E": {"pubmedqa": (0.99, 5)},  # nothing published
}


def _raw(plan: dict[str, dict[str, tuple[float, int]]] = PLAN) -> RawExport:
    cells = [RawCell(run_id=f"run-{model}", model=model, benchmark=benchmark, category=SHIPPED.category_of(benchmark),
                     metric="exact_match", score=score, n_scored=n, n_failed=0, n_total=n,
                     created_at=datetime(2026, 1, 1), proportion=False)
             for model, own in plan.items() for benchmark, (score, n) in own.items()]
    runs = [RawRun(run_id=f"run-{model}", model=model, status="finished", benchmarks=list(own),
                   manifest_sha256="0" * 64, dataset_fingerprints={}) for model, own in plan.items()]
    usage = [RawModelUsage(model=model, cost=None, n_total=80) for model in plan]
    return RawExport(runs=runs, cells=cells, usage=usage)


def test_the_export_counts_wins_as_the_leaderboard_does_over_its_published_scores() -> None:
    data = publish(_raw(), ExportPolicy(), request_id="exp-x", policy_sha256="0" * 64)
    exported = {m.model: (m.win_rate, m.win_pairs) for m in data.models}
    # A: ties B on pubmedqa (both 0.500 as published: a win for both), beats C; loses to C on medqa (B's medqa is
    # suppressed: no pairing). B: ties A, beats C. C: loses both on pubmedqa, beats A on medqa.
    assert exported == {"A": (0.667, 3), "B": (1.0, 2), "C": (0.333, 3), "D": (None, 0), "E": (None, 0)}

    published = [BenchmarkScore(model=c.model, benchmark=c.benchmark, metric=c.metric, score=c.score,
                                n=c.n_scored or 0) for c in data.cells if c.score is not None]
    rows = build_leaderboard(published, specs=SHIPPED, resamples=0)
    board = {r.model: (None if r.win_rate is None else round(r.win_rate, 3), r.win_pairs) for r in rows}
    assert board == {m: found for m, found in exported.items() if m != "E"}  # E: no published score, no row
    # the leaderboard itself compares the unrounded scores: there A beats B on pubmedqa
    raw = [BenchmarkScore(model=m, benchmark="pubmedqa", metric="exact_match", score=PLAN[m]["pubmedqa"][0], n=40)
           for m in ("A", "B")]
    assert {r.model: r.win_rate for r in build_leaderboard(raw, specs=SHIPPED, resamples=0)} == {
        "A": 1.0, "B": 0.0}



def test_a_model_without_a_win_rate_is_listed_after_every_model_with_one() -> None:
    """D has no rival on its benchmark (no win rate) and the best macro average; C lost its only pairing (win rate
    0). Ranked as if D's win rate were 0, D came before C on its macro average."""
    raw = _raw({"A": {"pubmedqa": (0.6, 40)}, "C": {"pubmedqa": (0.3, 40)}, "D": {"medication_qa": (0.9, 40)}})
    data = publish(raw, ExportPolicy(), request_id="exp-x", policy_sha256="0" * 64)
    assert [(m.rank, m.model, m.win_rate) for m in data.models] == [(1, "A", 1.0), (2, "C", 0.0), (None, "D", None)]


def test_a_model_without_a_win_rate_has_no_rank_in_the_bundle() -> None:
    """Every score suppressed (each on fewer instances than the minimum cell size): no model has a win rate. The
    bundle's leaderboard still numbered them, alphabetically, "1 A, 2 B": a reader outside took A for the better
    model, where the console calls both unranked. A model with no win rate now has no rank (empty in
    leaderboard.csv, null in aggregates.json, "-" in report.html, whose note says why), as the console shows it;
    the bundle says it is schema v2, where a rank may be null."""
    import csv
    import io
    import json
    import re

    from medhelm_local.export.render import render_files

    raw = _raw({"A": {"pubmedqa": (0.1, 7)}, "B": {"pubmedqa": (0.2, 5)}})
    data = publish(raw, ExportPolicy(), request_id="exp-x", policy_sha256="0" * 64)
    assert [(m.rank, m.model, m.win_rate) for m in data.models] == [(None, "A", None), (None, "B", None)]
    files = render_files(data)
    board = list(csv.DictReader(io.StringIO(files["leaderboard.csv"].decode())))
    assert [(row["rank"], row["model"]) for row in board] == [("", "A"), ("", "B")]
    published = json.loads(files["aggregates.json"])
    assert [m["rank"] for m in published["models"]] == [None, None]
    # A null rank is new in v2 (v1 numbered every model): a recipient's validator tells them apart by schema_id.
    assert published["schema_id"] == "medhelm-local/export-aggregates/v3"
    report = files["report.html"].decode()
    table = re.search(r'<table id="leaderboard">.*?</table>', report, re.S)
    assert table is not None
    assert re.findall(r'<tr><td class="num">([^<]*)</td><td>([AB])</td>', table.group(0)) == [("-", "A"), ("-", "B")]
    assert "A model with no win rate has no rank" in report


def test_a_report_with_costs_but_no_published_score_does_not_say_no_pricing_is_configured() -> None:
    """Both models priced (their costs published), every score suppressed: the report's cost scatter had nothing to
    plot and said "No cost available: no pricing is configured for these models", beside a leaderboard showing
    their costs. It now says what is missing: a published score."""
    from medhelm_local.export.render import render_files

    raw = _raw({"A": {"pubmedqa": (0.1, 7)}, "B": {"pubmedqa": (0.2, 5)}})
    raw = raw.model_copy(update={"usage": [RawModelUsage(model=m, cost=2.5, n_total=80) for m in ("A", "B")]})
    data = publish(raw, ExportPolicy(), request_id="exp-x", policy_sha256="0" * 64)
    assert [m.cost for m in data.models] == [2.5, 2.5]
    report = render_files(data)["report.html"].decode()
    assert "no pricing is configured" not in report
    assert "No model has both a published cost and a published score to plot." in report
