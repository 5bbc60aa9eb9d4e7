"""Under count rounding (``count_multiple`` > 1) a score is published with no more decimals than its instance count
supports: at the policy's 3 decimals, k/n singles out the exact n that the rounded count was meant to hide."""

from __future__ import annotations

import csv
import io
from datetime import datetime

import pytest

from medhelm_local.export import aggregates as agg
from medhelm_local.export import bundle
from medhelm_local.export.aggregates import RawCell, RawExport, RawModelUsage, RawRun, publish, publish_cell
from medhelm_local.export.policy import ExportPolicy, LoadedPolicy, Rounding
from medhelm_local.export.render import render_files

MULTIPLE = 5
ROUNDED = ExportPolicy().model_copy(update={"rounding": Rounding(count_multiple=MULTIPLE)})


def _cell(score: float, n: int, *, proportion: bool = True, benchmark: str = "b1", gold_empty: int | None = None,
          nonempty: float | None = None) -> RawCell:
    return RawCell(run_id="run-m", model="m", benchmark=benchmark, category="Cat A", metric="exact_match",
                   score=score, n_scored=n, n_failed=0, n_total=n, created_at=datetime(2026, 1, 1),
                   proportion=proportion, n_gold_empty=gold_empty, score_nonempty_gold=nonempty)


def _candidates(published_n: int) -> list[int]:
    """Every n the published (rounded) count leaves open."""
    return [n for n in range(published_n - MULTIPLE, published_n + MULTIPLE + 1)
            if n >= ROUNDED.min_cell_size and agg._count(n, ROUNDED) == published_n]


def _consistent(score: float, decimals: int, n: int, step: float = 1.0) -> bool:
    """Whether some mean over ``n`` values on a lattice of ``step`` (k x step / n) rounds to ``score``."""
    k = round(score * n / step)
    return any(0 <= j * step / n <= 1 and round(j * step / n, decimals) == score for j in (k - 1, k, k + 1))


def _pinned(score: float, decimals: int, published_n: int, step: float = 1.0) -> bool:
    return len([n for n in _candidates(published_n) if _consistent(score, decimals, n, step)]) == 1


def test_at_three_decimals_the_score_gives_the_rounded_count_away() -> None:
    """Why: over n from 20 to 200, most 3-decimal proportions fit one n only among those rounding alike."""
    cases = [(n, k) for n in range(20, 201) for k in range(n + 1)]
    pinned = sum(_pinned(round(k / n, 3), 3, agg._count(n, ROUNDED) or 0) for n, k in cases)
    assert pinned / len(cases) > 0.5


@pytest.mark.parametrize("step", [1.0, 1 / 3])  # a proportion; a mean of three judges' integer ratings
def test_a_published_score_fits_every_count_the_rounding_leaves_open(step: float) -> None:
    coarsened = 0
    for n in [*range(ROUNDED.min_cell_size, 260), 995, 1003, 1004, 1010, 4321]:
        for j in range(0, int(n / step) + 1, max(1, n // 40)):
            raw = _cell(j * step / n, n, proportion=step == 1.0)
            cell = publish_cell(raw, ROUNDED)
            if cell.score is None:  # withheld (an implied small count): nothing to give away
                continue
            assert cell.n_scored is not None
            decimals = 3 if cell.score_decimals is None else cell.score_decimals
            assert not _pinned(cell.score, decimals, cell.n_scored, step), (n, j)
            assert all(_consistent(cell.score, decimals, c, step) for c in _candidates(cell.n_scored)), (n, j)
            coarsened += cell.score_decimals is not None
    assert coarsened  # small cells were coarsened; large ones keep the policy's decimals
    assert publish_cell(_cell(0.5, 1010), ROUNDED).score_decimals is None


def test_decimals_follow_the_instance_count() -> None:
    assert [agg.count_rounding_decimals(n, ROUNDED) for n in (12, 14, 15, 104, 105, 1004, 1005, 50_000)] == [
        0, 0, 1, 1, 2, 2, 3, 3]
    assert agg.count_rounding_decimals(12, ExportPolicy()) == 3  # exact counts: nothing to hide
    two = ROUNDED.model_copy(update={"rounding": Rounding(count_multiple=MULTIPLE, score_decimals=2)})
    assert agg.count_rounding_decimals(50_000, two) == 2  # never more than the policy's
    # the score on non-empty gold has fewer instances: the cell's scores all take its (smaller) decimals
    cell = publish_cell(_cell(0.61234, 300, gold_empty=250, nonempty=0.4321, proportion=False), ROUNDED)
    assert (cell.score, cell.score_nonempty_gold, cell.score_decimals) == (0.6, 0.4, 1)


def test_exact_counts_keep_the_policys_decimals() -> None:
    cell = publish_cell(_cell(17 / 41, 41), ExportPolicy())
    assert cell.score == round(17 / 41, 3) and cell.score_decimals is None and "score:coarsened" not in cell.suppressed


def _raw(*cells: RawCell) -> RawExport:
    return RawExport(runs=[RawRun(run_id="run-m", model="m", status="finished", benchmarks=[c.benchmark for c in cells],
                                  manifest_sha256="0" * 64, dataset_fingerprints={})],
                     cells=list(cells), usage=[RawModelUsage(model="m", cost=None, n_total=80)])


def test_the_bundle_prints_a_coarsened_score_as_published_and_says_why() -> None:
    raw = _raw(_cell(13 / 36, 36), _cell(0.43219, 1200, benchmark="b2", proportion=False))
    data = publish(raw, ROUNDED, request_id="exp-x", policy_sha256="0" * 64)
    small, large = data.cells
    assert (small.score, small.score_decimals, small.n_scored) == (0.4, 1, 35)
    assert (large.score, large.score_decimals) == (0.432, None)
    files = render_files(data)
    html = files["report.html"].decode()
    assert ">0.4<" in html and "0.400" not in html and ">0.432<" in html
    assert "Score: fewer decimals where counts are rounded" in html
    rows = list(csv.DictReader(io.StringIO(files["cells.csv"].decode())))
    assert (rows[0]["score"], rows[0]["suppressed"]) == ("0.4", "score:coarsened")
    assert any(note.startswith("Where the policy rounds counts") for note in data.notes)


def test_the_checks_refuse_a_score_finer_than_its_count_supports() -> None:
    raw = _raw(_cell(13 / 36, 36))
    loaded = LoadedPolicy(policy=ROUNDED, sha256="0" * 64, source="test")
    data = publish(raw, ROUNDED, request_id="exp-x", policy_sha256="0" * 64)
    assert all(c.result == "pass" for c in bundle._structural_checks(data, raw, loaded))
    tampered = data.model_copy(deep=True)
    tampered.cells[0].score = round(13 / 36, 3)  # what the policy's decimals alone would print: 0.361
    failed = {c.id: c.findings for c in bundle._structural_checks(tampered, raw, loaded) if c.result == "fail"}
    assert [f["location"] for f in failed["implied_counts"]] == ["$.cells[0].score"]


def test_summary_intervals_take_the_fewest_decimals_of_the_cells_behind_them() -> None:
    """A category of one benchmark has that benchmark's interval: it must not print what the cell's own CI may
    not (the resample means of a judge's ratings over n are on the same 1/(3n) lattice)."""
    small = _cell(0.61234, 36, proportion=False)
    small.replicates = [0.5 + (i % 97) / 970 for i in range(1000)]
    large = _cell(0.43219, 1200, proportion=False, benchmark="b2")
    large.replicates = [0.4 + (i % 89) / 2890 for i in range(1000)]
    large.category = "Cat B"
    raw = _raw(small, large)
    data = publish(raw, ROUNDED, request_id="exp-x", policy_sha256="0" * 64)
    model = data.models[0]
    low_a, low_b = model.category_ci_low["Cat A"], model.category_ci_low["Cat B"]
    assert low_a is not None and low_b is not None and model.macro_avg_ci_low is not None
    assert round(low_a, 1) == low_a and round(low_b, 3) == low_b and round(low_b, 1) != low_b
    assert round(model.macro_avg_ci_low, 1) == model.macro_avg_ci_low  # over both: the fewer decimals
    loaded = LoadedPolicy(policy=ROUNDED, sha256="0" * 64, source="test")
    assert all(c.result == "pass" for c in bundle._structural_checks(data, raw, loaded))
    tampered = data.model_copy(deep=True)
    tampered.models[0].category_ci_low = {"Cat A": 0.513, "Cat B": low_b}
    failed = {c.id: c.findings for c in bundle._structural_checks(tampered, raw, loaded) if c.result == "fail"}
    assert [f["location"] for f in failed["implied_counts"]] == ["$.models[0].category_ci_low{key 0}"]
