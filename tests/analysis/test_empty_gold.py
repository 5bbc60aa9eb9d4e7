"""EHRSQL's empty-gold figures travel from the scores to the leaderboard and the export (issue 13 §2)."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime
from pathlib import Path

import pytest

from medhelm_local.analysis.aggregate import latest_scores, latest_series
from medhelm_local.analysis.leaderboard import build_leaderboard
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.commands.leaderboard import leaderboard_payload
from medhelm_local.export.aggregates import RawCell, collect, publish, publish_cell
from medhelm_local.export.policy import ExportPolicy
from medhelm_local.export.render import render_files
from medhelm_local.home.config import ConsoleRole
from medhelm_local.records import Instance
from medhelm_local.scoring.ehrsql import run_query
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.store import Store
from tests.console.pages import page_as
from tests.scoring.helpers import add_run, make_home, register
from tests.scoring.test_real_data import instances

POLICY = ExportPolicy()
EMPTY_QUERY = "SELECT patientunitstayid FROM patient WHERE 0"


def sample(public_data: Path, empty: int, nonempty: int) -> list[Instance]:
    """Real answerable EHRSQL items: ``empty`` whose gold returns no rows, ``nonempty`` whose gold returns rows."""
    db = str(public_data / "ehrsql" / "eicu.sqlite")
    picked: dict[bool, list[Instance]] = {True: [], False: []}
    for instance in instances("ehrsql"):
        if not instance.references:
            continue
        try:
            is_empty = not run_query(db, instance.references[0])
        except Exception:
            continue
        wanted = empty if is_empty else nonempty
        if len(picked[is_empty]) < wanted:
            picked[is_empty].append(instance)
    return picked[True] + picked[False]


def test_leaderboard_and_export_carry_empty_gold(public_data: Path, tmp_path: Path) -> None:
    data = sample(public_data, empty=30, nonempty=20)
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        fingerprint = register(store, "ehrsql", data)
        # Right on 10 of the 20 non-empty items, the empty query everywhere else (credited on the 30 empty ones).
        nonempty = data[30:]
        outputs = {i.id: (i.references[0] if i in nonempty[:10] else EMPTY_QUERY) for i in data}
        run_id = add_run(store, "model-a", "ehrsql", fingerprint, data, outputs)
        score_benchmark(store, SHIPPED, run_id, "ehrsql")
        results = latest_scores(store, SHIPPED)
        series = latest_series(store, SHIPPED)
        raw = collect(store, SHIPPED, home.config, [run_id])

    (result,) = results
    assert (result.score, result.n, result.n_gold_empty, result.score_nonempty_gold) == (40 / 50, 50, 30, 0.5)

    rows = build_leaderboard(results, specs=SHIPPED, series=series, resamples=0)
    entry = leaderboard_payload(rows)[0]["benchmarks"]["ehrsql"]
    assert entry["score"] == 0.8 and entry["n_gold_empty"] == 30 and entry["score_nonempty_gold"] == 0.5
    # The console's leaderboard says it beside the score, as the CLI's table does: it showed 0.800 alone, most of it
    # earned by answering "no rows" to questions whose gold query returns none.
    page = page_as(home, "/leaderboard", ConsoleRole.INFORMATICS)
    scores = " ".join(re.sub(r"<[^>]+>", " ", page.text.split('id="scores"')[1].split("</table>")[0]).split())
    assert "0.800" in scores and "30 with empty gold; 0.500 on the others" in scores

    (cell,) = raw.cells
    assert (cell.n_gold_empty, cell.score_nonempty_gold) == (30, 0.5)
    # Under the default minimum cell size of 11, 0.8 of 50 would reveal the 10 wrong answers (issue 12 §4): the
    # score is withheld, and so is the score on non-empty gold (10 of 20) that would give it back.
    strict = publish(raw, POLICY, request_id="req-1", policy_sha256="0" * 64).cells[0]
    assert strict.score is None and strict.score_nonempty_gold is None and strict.n_gold_empty == 30
    assert {"score:implied_count", "score_nonempty_gold:implied_count"} <= set(strict.suppressed)
    published = publish(raw, ExportPolicy(min_cell_size=10), request_id="req-1", policy_sha256="0" * 64)
    assert (published.cells[0].n_gold_empty, published.cells[0].score_nonempty_gold) == (30, 0.5)
    table = list(csv.DictReader(io.StringIO(render_files(published)["cells.csv"].decode())))
    assert (table[0]["n_gold_empty"], table[0]["score_nonempty_gold"]) == ("30", "0.5")


def _cell(n_scored: int, n_gold_empty: int) -> RawCell:
    return RawCell(run_id="r", model="m", benchmark="ehrsql", category="c", metric="ehrsql_execution_accuracy",
                   score=0.5, n_scored=n_scored, n_failed=0, n_total=n_scored, created_at=datetime(2026, 1, 1),
                   n_gold_empty=n_gold_empty, score_nonempty_gold=0.25)


@pytest.mark.parametrize(("n_scored", "n_gold_empty", "published", "reasons"), [
    (100, 40, (40, 0.25), []),
    # the score on the 95 others, beside the score and n, would pin the withheld 5 by its decimals
    (100, 5, (None, None), ["n_gold_empty:small_cell", "score_nonempty_gold:complementary"]),
    # 95 empty beside 100 scored would reveal the 5 non-empty items, and the score on them is a small cell
    (100, 95, (None, None), ["n_gold_empty:complementary", "score_nonempty_gold:small_cell"]),
])
def test_empty_gold_figures_follow_the_small_cell_rule(n_scored: int, n_gold_empty: int,
                                                      published: tuple[int | None, float | None],
                                                      reasons: list[str]) -> None:
    cell = publish_cell(_cell(n_scored, n_gold_empty), POLICY)
    assert (cell.n_gold_empty, cell.score_nonempty_gold) == published
    assert [r for r in cell.suppressed if "gold" in r] == reasons
