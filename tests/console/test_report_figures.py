"""The exported report.html reads as a document: human headings, one number format, the 95% CI and n beside every
published score (none beside a suppressed one), the win-rate rule, and the console leaderboard's own figures (one
function, analysis.figures.leaderboard_figures, draws both)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from medhelm_local.analysis import figures
from medhelm_local.analysis.leaderboard import ModelRow, WinRule
from medhelm_local.export import render
from medhelm_local.export.aggregates import ExportAggregates, RawExport, RawModelUsage, RawRun, publish
from medhelm_local.export.render import CELL_COLUMNS, LEADERBOARD_COLUMNS, fixed_text, render_files
from medhelm_local.export.scan import strings_of
from medhelm_local.records import BenchmarkScore
from medhelm_local.webconsole import data as console_data
from medhelm_local.webconsole import pages_informatics
from tests.compliance.test_disclosure import POLICY, _cell


class _Tables(HTMLParser):
    """Headings (th, h1, h2) and every table's rows as lists of cell texts (by the table's id)."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._heading = False
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._heading = tag in ("th", "h1", "h2")
        if tag == "table":
            self._table = dict(attrs).get("id") or f"table-{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "h1", "h2"):
            self._heading = False
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        if tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._heading and data.strip():
            self.headings.append(data.strip())
        if self._cell is not None:
            self._cell.append(data)


def _published() -> ExportAggregates:
    runs = [RawRun(run_id=f"run-{m}", model=m, status="finished", benchmarks=["b1", "b2"], manifest_sha256="0" * 64,
                   dataset_fingerprints={}) for m in ("alpha", "beta")]
    # 40 instances each (no count a score implies is a small cell), one cell of 4: suppressed with its CI
    cells = [_cell("alpha", "b1", 0.725), _cell("alpha", "b2", 0.4, category="Cat B"),
             _cell("beta", "b1", 0.7), _cell("beta", "b2", 0.6, n_scored=4, category="Cat B")]
    for cell, (low, high) in zip(cells, [(0.575, 0.85), (0.25, 0.55), (0.55, 0.85), (0.0, 1.0)], strict=True):
        cell.ci_low, cell.ci_high = low + 1e-7, high - 1e-7  # unrounded, as the bootstrap gives them
        assert cell.score is not None
        sign = 1 if cell.model == "alpha" else -1  # alpha's resampled scores rise as beta's fall: +-0.1 around each
        cell.replicates = [cell.score + sign * (i - 500) / 5000 for i in range(1000)]
    usage = [RawModelUsage(model="alpha", cost=12.5, n_total=80), RawModelUsage(model="beta", cost=3.25, n_total=44)]
    return publish(RawExport(runs=runs, cells=cells, usage=usage), POLICY, request_id="exp-x",
                   policy_sha256="0" * 64)


def _report() -> str:
    return render_files(_published())["report.html"].decode()


def _parse(html: str) -> _Tables:
    parser = _Tables()
    parser.feed(html)
    return parser


def test_report_headings_are_words_not_identifiers() -> None:
    parser = _parse(_report())
    raw = set(LEADERBOARD_COLUMNS) | set(CELL_COLUMNS)
    assert not [h for h in parser.headings if h in raw - {"n"}]
    assert {"Win rate", "Macro average", "n scored", "95% CI", "n pairs", "n benchmarks", "Scores by benchmark",
            "Benchmark heatmap", "Category means", "Cost and performance"} <= set(parser.headings)
    cells = parser.tables["cells"]
    suppressed = [row[-1] for row in cells[1:] if row[-1] != "-"]
    assert suppressed and all(":" in s and "_" not in s for s in suppressed)  # "Score: below the minimum ..."


def test_every_published_score_has_its_ci_and_n_and_a_suppressed_one_has_neither() -> None:
    tables = _parse(_report()).tables
    scores = tables["scores"]
    assert scores[0][2:] == ["alpha", "beta"] and scores[1][2:] == ["Score", "95% CI", "n"] * 2
    by_benchmark = {row[0]: row[2:] for row in scores[2:]}
    assert by_benchmark["b1"] == ["0.725", "[0.575, 0.850]", "40", "0.700", "[0.550, 0.850]", "40"]
    assert by_benchmark["b2"][:3] == ["0.400", "[0.250, 0.550]", "40"]
    assert by_benchmark["b2"][3:] == ["suppressed", "-", "-"]  # n = 4: no score, so no CI and no n beside it
    cells = {(row[1], row[2]): row for row in tables["cells"][1:]}
    assert cells[("beta", "b2")][5:7] == ["-", "-"]
    assert cells[("alpha", "b1")][5:7] == ["0.725", "[0.575, 0.850]"]
    leaderboard = tables["leaderboard"]
    assert leaderboard[0] == ["Rank", "Model", "Win rate", "95% CI", "n pairs", "Macro average", "95% CI",
                              "n benchmarks", "Benchmarks suppressed", "Estimated cost"]
    alpha = next(r for r in leaderboard[1:] if r[1] == "alpha")
    beta = next(r for r in leaderboard[1:] if r[1] == "beta")
    # alpha wins its only pair (b1: 0.725 against 0.7) on some resamples and loses it on others: its win rate's CI
    # spans 0 to 1; the macro average is over b1 and b2, the 95% interval of their resampled mean
    assert alpha[2:8] == ["1.000", "[0.000, 1.000]", "1", "0.562", "[0.467, 0.657]", "2"]
    assert beta[2:8] == ["0.000", "[0.000, 1.000]", "1", "0.700", "[0.605, 0.795]", "1"]
    categories = {(r[0], r[1]): r[2:] for r in tables["categories"][1:]}
    assert categories[("alpha", "Cat B")] == ["0.400", "[0.305, 0.495]", "1"]
    assert ("beta", "Cat B") not in categories  # its only score is suppressed


def test_one_number_format_and_the_win_rule_is_stated() -> None:
    html = _report()
    numbers = re.findall(r'<td class="num">(\d+\.\d+)</td>|<span>(\d+\.\d+)</span>', html)
    decimals = {len(n.split(".")[1]) for pair in numbers for n in pair if n}
    assert numbers and decimals == {3}  # never "0.0" beside "0.395", the CIs included
    assert re.findall(r'<td class="num cost">([\d.]+)</td>', html) == ["12.50", "3.25"]  # the policy's 2 decimals
    rule = _parse(html).tables  # the rule in words under the leaderboard
    assert rule["leaderboard"] and "meets or beats" in html and "tie is a win for both" in html


def test_report_figures_are_drawn_by_the_console_function_and_pass_the_string_scan() -> None:
    data = _published()
    html = render_files(data)["report.html"].decode()
    expected = figures.leaderboard_figures(
        ["alpha", "beta"], ["b1", "b2"],
        {("alpha", "b1"): 0.725, ("alpha", "b2"): 0.4, ("beta", "b1"): 0.7, ("beta", "b2"): None},
        {("alpha", "Cat A"): 0.725, ("alpha", "Cat B"): 0.4, ("beta", "Cat A"): 0.7},
        {"alpha": 1.0, "beta": 0.0}, {"alpha": 12.5, "beta": 3.25}, digits=3,
        text=figures.FigureText(
            heatmap="Benchmark heatmap", categories="Category means", scatter="Cost and performance",
            missing="suppressed", no_scores="No published scores.",
            no_cost="No cost available: no pricing is configured for these models.", score_axis="Win rate",
            cost_axis="Estimated cost", front="ringed and joined: the cost / win-rate Pareto front"),
        category_intervals={("alpha", "Cat A"): (0.63, 0.82), ("alpha", "Cat B"): (0.305, 0.495),
                            ("beta", "Cat A"): (0.605, 0.795)})
    for svg in (expected.heatmap, expected.categories, expected.scatter):
        assert svg.startswith("<svg") and svg in html
    assert "suppressed" in expected.heatmap and "<polyline" in expected.scatter  # both models on the front
    assert expected.categories.count("<path") == 3  # each category mean's 95% CI as a whisker
    _, external = strings_of("report.html", html.encode())
    assert external == []
    # Every heading and every text the report writes is fixed text of the export vocabulary, a number, or a model,
    # benchmark, category or run name from the data (the full scan over a real export: tests/compliance).
    strings, _ = strings_of("report.html", html.encode())
    data_values = {"alpha", "beta", "b1", "b2", "Cat A", "Cat B", "exact_match", "run-alpha", "run-beta", "finished",
                   "default", "exp-x", data.generated_at, data.appliance_version, "0" * 64, *data.notes}
    odd = [v for _, v in strings if v not in fixed_text() and v not in data_values and not re.fullmatch(r"[\d.]+", v)]
    assert odd == []


def test_console_leaderboard_and_report_call_one_figure_function(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    real = figures.leaderboard_figures

    def recording(*args: Any, **kwargs: Any) -> figures.LeaderboardFigures:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(figures, "leaderboard_figures", recording)
    monkeypatch.setattr(pages_informatics, "leaderboard_figures", recording)
    render.render_html(_published())
    scores = {("alpha", "b1"): 0.725, ("beta", "b1"): 0.7}
    rows = [ModelRow(model=m, win_rate=r, macro_avg=scores[(m, "b1")], categories={"Cat A": scores[(m, "b1")]},
                     cost=c, benchmarks={"b1": BenchmarkScore(model=m, benchmark="b1", metric="exact_match",
                                                              score=scores[(m, "b1")], n=40, n_failed=0)})
            for m, r, c in (("alpha", 1.0, 12.5), ("beta", 0.0, 3.25))]
    view = console_data.LeaderboardView(rows=rows, mdes={}, prompt_style="default", rule=WinRule.PAPER,
                                        other_styles={}, benchmarks=["b1"], categories=["Cat A"])
    drawn = pages_informatics.console_figures(view)
    assert len(calls) == 2
    report_call, console_call = calls
    assert console_call[:6] == (["alpha", "beta"], ["b1"], scores, {("alpha", "Cat A"): 0.725, ("beta", "Cat A"): 0.7},
                                {"alpha": 1.0, "beta": 0.0}, {"alpha": 12.5, "beta": 3.25})
    assert report_call[4] == {"alpha": 1.0, "beta": 0.0}  # the scatter plots win rate against cost in both
    assert "alpha" in drawn.scatter and "0.725" in drawn.heatmap
