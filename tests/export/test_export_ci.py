"""The 95% CI in the export: the CLI leaderboard's interval, rounded as the scores are, published only beside its
score (a suppressed score's CI is suppressed too), withheld for a proportion where counts are rounded; the
structural checks catch any CI that breaks those rules, and differencing covers a cell that publishes only a CI."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path

from medhelm_local.export import aggregates as agg
from medhelm_local.export import bundle
from medhelm_local.export.aggregates import RawCell, RawExport, RawModelUsage, RawRun, publish, publish_cell
from medhelm_local.export.policy import ExportPolicy, LoadedPolicy, Rounding
from tests.compliance.conftest import EvaluatedHome, request_export

POLICY = ExportPolicy()


def _cell(score: float | None = 0.5, n_scored: int = 40, n_failed: int = 0, ci: tuple[float, float] | None = (
        0.3456789, 0.6543211), proportion: bool = True, benchmark: str = "b1") -> RawCell:
    return RawCell(run_id="run-m", model="m", benchmark=benchmark, category="Cat A", metric="exact_match",
                   score=score, n_scored=n_scored, n_failed=n_failed, n_total=n_scored + n_failed,
                   created_at=datetime(2026, 1, 1), proportion=proportion,
                   ci_low=None if ci is None else ci[0], ci_high=None if ci is None else ci[1])


def test_a_published_score_carries_its_ci_rounded_as_the_scores() -> None:
    cell = publish_cell(_cell(), POLICY)
    assert (cell.score, cell.ci_low, cell.ci_high) == (0.5, 0.346, 0.654)
    two = publish_cell(_cell(), POLICY.model_copy(update={"rounding": Rounding(score_decimals=2)}))
    assert (two.ci_low, two.ci_high) == (0.35, 0.65)
    assert not [m for m in cell.suppressed if m.startswith("ci:")]


def test_a_suppressed_score_has_no_ci() -> None:
    small = publish_cell(_cell(n_scored=7), POLICY)  # the whole cell is small
    assert (small.score, small.ci_low, small.ci_high) == (None, None, None) and small.suppressed == ["cell:small_cell"]
    implied = publish_cell(_cell(score=2 / 40, ci=(0.0, 0.125)), POLICY)  # 2 of 40: a small implied count
    assert (implied.score, implied.ci_low, implied.ci_high) == (None, None, None)
    assert {"score:implied_count", "ci:score_suppressed"} <= set(implied.suppressed)
    complementary = publish_cell(_cell(n_failed=3), POLICY)  # 3 failures: the score would reveal them
    assert complementary.ci_low is None and "ci:score_suppressed" in complementary.suppressed
    scored_few = publish_cell(_cell(n_scored=10, n_failed=5), POLICY)  # 15 planned, 10 scored
    assert scored_few.n_total == 15 and scored_few.ci_low is None and scored_few.ci_high is None


def test_count_rounding_withholds_a_proportions_ci_only() -> None:
    rounded = POLICY.model_copy(update={"rounding": Rounding(count_multiple=5)})
    proportion = publish_cell(_cell(n_scored=41), rounded)
    assert proportion.score == 0.5 and proportion.n_scored == 40  # published n rounded
    assert proportion.ci_low is None and "ci:count_rounding" in proportion.suppressed
    mean = publish_cell(_cell(n_scored=41, score=0.61234, proportion=False), rounded)
    assert (mean.score, mean.ci_low, mean.ci_high) == (0.6, 0.3, 0.7)  # one decimal: n is 36 to 46 (see below)
    assert mean.score_decimals == 1 and "score:coarsened" in mean.suppressed


def test_fewer_than_two_instances_have_no_ci_and_no_marker() -> None:
    cell = publish_cell(_cell(ci=None), POLICY)
    assert cell.score == 0.5 and cell.ci_low is None and not [m for m in cell.suppressed if m.startswith("ci")]


def _raw(*cells: RawCell) -> RawExport:
    return RawExport(runs=[RawRun(run_id="run-m", model="m", status="finished", benchmarks=[c.benchmark for c in cells],
                                  manifest_sha256="0" * 64, dataset_fingerprints={})],
                     cells=list(cells), usage=[RawModelUsage(model="m", cost=None, n_total=80)])


def _checks(data: agg.ExportAggregates, raw: RawExport, policy: ExportPolicy) -> dict[str, list[dict[str, str]]]:
    loaded = LoadedPolicy(policy=policy, sha256="0" * 64, source="test")
    return {c.id: c.findings for c in bundle._structural_checks(data, raw, loaded) if c.result == "fail"}


def test_structural_checks_catch_a_ci_that_breaks_the_rules() -> None:
    raw = _raw(_cell(), _cell(benchmark="b2", score=2 / 40, ci=(0.0, 0.125)))
    data = publish(raw, POLICY, request_id="exp-x", policy_sha256="0" * 64)
    assert _checks(data, raw, POLICY) == {}
    tampered = data.model_copy(deep=True)
    tampered.cells[1].ci_low, tampered.cells[1].ci_high = 0.0, 0.125  # beside the suppressed score
    tampered.cells[0].ci_high = 0.6543211  # not rounded
    failed = _checks(tampered, raw, POLICY)
    assert [f["location"] for f in failed["complementary_suppression"]] == ["$.cells[1].ci_low"]
    assert [f["location"] for f in failed["rounding"]] == ["$.cells[0].ci_high"]
    assert "0.125" not in json.dumps(failed)  # findings never quote values
    rounded = POLICY.model_copy(update={"rounding": Rounding(count_multiple=5)})
    leaky = publish(raw, rounded, request_id="exp-x", policy_sha256="0" * 64).model_copy(deep=True)
    assert leaky.cells[0].ci_low is None
    leaky.cells[0].ci_low, leaky.cells[0].ci_high = 0.346, 0.654
    # a proportion's interval, and one with more decimals than 40 instances support under rounding
    assert [f["location"] for f in _checks(leaky, raw, rounded)["implied_counts"]] == ["$.cells[0].ci_low"] * 2


def test_differencing_covers_a_cell_that_publishes_only_a_ci() -> None:
    data = publish(_raw(_cell()), POLICY, request_id="exp-x", policy_sha256="0" * 64)
    only_ci = data.cells[0].model_copy(update={"score": None, "n_scored": None, "n_failed": None, "n_total": None})
    assert bundle._published(only_ci)
    nothing = only_ci.model_copy(update={"ci_low": None, "ci_high": None})
    assert not bundle._published(nothing)


def test_export_ci_is_the_cli_leaderboards_ci_rounded(evaluated: EvaluatedHome) -> None:
    cli = evaluated.cli
    request = request_export(cli, evaluated.run_id)
    assert request["status"] == "ready", request["checks"]
    folder = Path(cli.home) / "exports" / str(request["request_id"]) / "bundle"
    cell = json.loads((folder / "aggregates.json").read_text())["cells"][0]
    result = cli("leaderboard", "--json")
    assert result.code == 0, result.stderr
    entry = json.loads(result.stdout)[0]["benchmarks"]["hospice_referral"]
    assert entry["ci_low"] is not None and entry["ci_low"] < entry["score"] < entry["ci_high"]
    assert (cell["score"], cell["ci_low"], cell["ci_high"]) == (
        round(entry["score"], 3), round(entry["ci_low"], 3), round(entry["ci_high"], 3))
    table = list(csv.DictReader(io.StringIO((folder / "cells.csv").read_text())))
    assert table[0]["ci_low"] == str(cell["ci_low"]) and table[0]["ci_high"] == str(cell["ci_high"])
    html = (folder / "report.html").read_text()
    assert f"<span>{cell['ci_low']:.3f}</span>, <span>{cell['ci_high']:.3f}</span>" in html


def _summary_raw(suppressed_draws: list[float] | None = None) -> RawExport:
    """Model m: b1 (published) and b2 (4 instances: suppressed), each with resampled scores."""
    b1 = _cell()
    b1.replicates = [0.4 + i / 5000 for i in range(1000)]  # 0.4 .. 0.6
    b2 = _cell(benchmark="b2", n_scored=4, score=0.25, ci=(0.0, 0.75))
    b2.replicates = suppressed_draws
    return _raw(b1, b2)


def test_summary_cis_use_published_scores_only() -> None:
    data = publish(_summary_raw([0.0] * 1000), POLICY, request_id="exp-x", policy_sha256="0" * 64)
    model = data.models[0]
    assert (model.macro_avg, model.macro_avg_ci_low, model.macro_avg_ci_high) == (0.5, 0.405, 0.595)
    assert model.category_ci_low == {"Cat A": 0.405} and model.category_ci_high == {"Cat A": 0.595}
    assert model.category_n == {"Cat A": 1} and model.suppressed == []
    # whatever the suppressed cell's resamples are, the summary's interval is the same
    other = publish(_summary_raw([1.0] * 1000), POLICY, request_id="exp-x", policy_sha256="0" * 64)
    assert other.models[0] == model
    assert model.win_rate is None and model.win_rate_ci_low is None  # a single model has no win rate


def test_summary_cis_are_withheld_under_count_rounding_and_without_resamples() -> None:
    rounded = POLICY.model_copy(update={"rounding": Rounding(count_multiple=5)})
    model = publish(_summary_raw(), rounded, request_id="exp-x", policy_sha256="0" * 64).models[0]
    assert model.macro_avg == 0.5 and model.macro_avg_ci_low is None and model.category_ci_low == {"Cat A": None}
    assert model.suppressed == ["category_ci:count_rounding", "macro_avg_ci:count_rounding"]
    few = _raw(_cell())  # a score without resamples (as from fewer than two instances)
    model = publish(few, POLICY, request_id="exp-x", policy_sha256="0" * 64).models[0]
    assert model.macro_avg_ci_low is None and "macro_avg_ci:too_few_instances" in model.suppressed


def test_structural_checks_cover_the_summary_cis() -> None:
    raw = _summary_raw()
    data = publish(raw, POLICY, request_id="exp-x", policy_sha256="0" * 64)
    tampered = data.model_copy(deep=True)
    tampered.models[0].macro_avg_ci_low = 0.4051234
    tampered.models[0].category_ci_high = {"Cat A": 0.5951234}
    locations = [f["location"] for f in _checks(tampered, raw, POLICY)["rounding"]]
    assert locations == ["$.models[0].macro_avg_ci_low", "$.models[0].category_ci_high{key 0}"]
    rounded = POLICY.model_copy(update={"rounding": Rounding(count_multiple=5)})
    leaky = publish(raw, rounded, request_id="exp-x", policy_sha256="0" * 64).model_copy(deep=True)
    leaky.models[0].macro_avg_ci_low, leaky.models[0].macro_avg_ci_high = 0.405, 0.595
    # over proportions, and with more decimals than the 40 instances behind it support under rounding
    assert [f["location"] for f in _checks(leaky, raw, rounded)["implied_counts"]] == [
        "$.models[0].macro_avg_ci_low"] * 2


def test_a_real_export_carries_summary_cis(evaluated: EvaluatedHome) -> None:
    request = request_export(evaluated.cli, evaluated.run_id)
    assert request["status"] == "ready", request["checks"]
    folder = Path(evaluated.cli.home) / "exports" / str(request["request_id"]) / "bundle"
    model = json.loads((folder / "aggregates.json").read_text())["models"][0]
    assert model["macro_avg_ci_low"] < model["macro_avg"] < model["macro_avg_ci_high"]
    category = next(iter(model["category_scores"]))
    assert model["category_ci_low"][category] < model["category_scores"][category] < model["category_ci_high"][category]
    assert model["category_n"] == {category: 1} and model["suppressed"] == []
    categories = list(csv.DictReader(io.StringIO((folder / "categories.csv").read_text())))
    assert categories[0]["ci_low"] == str(model["category_ci_low"][category]) and categories[0]["n_benchmarks"] == "1"


def test_why_a_proportions_ci_is_withheld_under_count_rounding() -> None:
    """The bootstrap endpoints of a proportion are multiples of 1/n (counts of resampled instances): with the
    rounded score they single out the exact n that a count rounded to a multiple of 5 was meant to hide."""
    import numpy as np

    from medhelm_local.analysis.stats import bootstrap_ci

    n, k = 36, 12  # published as n = 35 under count_multiple 5: n may be 33 to 37
    interval = bootstrap_ci(np.array([1.0] * k + [0.0] * (n - k)), seed=agg.CI_SEED)
    assert interval is not None
    assert all(abs(v * n - round(v * n)) < 1e-9 for v in interval)  # multiples of 1/n

    def consistent(values: list[float], candidate: int) -> bool:  # each value is some count / candidate, rounded
        return all(abs(v * candidate - round(v * candidate)) <= 0.0005 * candidate for v in values)

    window = range(33, 38)
    score = round(k / n, 3)
    assert [c for c in window if consistent([score], c)] == [33, 36]  # the score alone leaves n open
    published = [score, *(round(v, 3) for v in interval)]
    assert [c for c in window if consistent(published, c)] == [36]  # with the interval, n is known


def test_the_win_rate_ci_compares_scores_as_the_win_rate_does() -> None:
    """The published win rate compares the published (rounded) scores: 0.8304 and 0.8296 are both 0.83, a tie, a
    win for both under MedHELM's rule. Its interval compared the raw resamples, where the first always beats the
    second: the second model's interval was [0, 0] beside a win rate of 1."""
    def judged(model: str, score: float) -> RawCell:
        cell = RawCell(run_id=f"run-{model}", model=model, benchmark="b1", category="Cat A", metric="jury_mean",
                       score=score, n_scored=400, n_failed=0, n_total=400, created_at=datetime(2026, 1, 1),
                       proportion=False, ci_low=score - 0.0003, ci_high=score + 0.0003)
        cell.replicates = [score + 0.0002 * ((i % 5) - 2) / 2 for i in range(1000)]  # within 0.0002 of the score
        return cell

    cells = [judged("ahead", 0.8304), judged("behind", 0.8296)]
    raw = RawExport(runs=[RawRun(run_id=c.run_id, model=c.model, status="finished", benchmarks=["b1"],
                                 manifest_sha256="0" * 64, dataset_fingerprints={}) for c in cells],
                    cells=cells, usage=[RawModelUsage(model=c.model, cost=None, n_total=400) for c in cells])
    policy = POLICY.model_copy(update={"rounding": Rounding(score_decimals=2)})
    models = {m.model: m for m in publish(raw, policy, request_id="exp-x", policy_sha256="0" * 64).models}
    for model in models.values():
        assert model.win_rate == 1.0  # 0.83 against 0.83
        assert model.win_rate_ci_low is not None and model.win_rate_ci_high is not None
        assert model.win_rate_ci_low <= model.win_rate <= model.win_rate_ci_high, model
