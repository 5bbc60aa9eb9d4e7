"""The exported report.html reads as a document: human headings, one number format, n beside every published
score, the win-rate rule, and the console leaderboard's own figures (analysis/figures.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from medhelm_local.analysis import figures
from medhelm_local.export.aggregates import RawExport, RawModelUsage, RawRun, publish
from medhelm_local.export.render import CELL_COLUMNS, LEADERBOARD_COLUMNS, fixed_text, render_files
from medhelm_local.export.scan import strings_of
from tests.compliance.test_disclosure import POLICY, _cell


class _Headings(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self._in = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in = tag in ("th", "h1", "h2")

    def handle_endtag(self, tag: str) -> None:
        self._in = False

    def handle_data(self, data: str) -> None:
        if self._in and data.strip():
            self.headings.append(data.strip())


def _report() -> str:
    runs = [RawRun(run_id=f"run-{m}", model=m, status="finished", benchmarks=["b1", "b2"], manifest_sha256="0" * 64,
                   dataset_fingerprints={}) for m in ("alpha", "beta")]
    # 40 instances each (no count a score implies is a small cell), one cell of 4: suppressed
    cells = [_cell("alpha", "b1", 0.725), _cell("alpha", "b2", 0.4, category="Cat B"),
             _cell("beta", "b1", 0.7), _cell("beta", "b2", 0.6, n_scored=4, category="Cat B")]
    usage = [RawModelUsage(model="alpha", cost=12.5, n_total=80), RawModelUsage(model="beta", cost=3.25, n_total=44)]
    data = publish(RawExport(runs=runs, cells=cells, usage=usage), POLICY, request_id="exp-x",
                   policy_sha256="0" * 64)
    return render_files(data)["report.html"].decode()


def test_report_headings_are_words_not_identifiers() -> None:
    parser = _Headings()
    parser.feed(_report())
    raw = set(LEADERBOARD_COLUMNS) | set(CELL_COLUMNS)
    assert not [h for h in parser.headings if h in raw - {"n"}]
    assert {"Win rate", "Macro average", "n scored", "Scores by benchmark", "Benchmark heatmap"} <= set(parser.headings)


def test_report_prints_every_score_alike_with_its_n_and_states_the_win_rule() -> None:
    html = _report()
    scores = re.findall(r'<td class="num">\d+\.(\d+)</td><td class="n">', html)
    rates = re.findall(r'<td class="num">[01]\.(\d+)</td><td class="num">0\.(\d+)</td>', html)  # win, macro
    assert scores and rates
    assert len({len(d) for d in scores} | {len(d) for pair in rates for d in pair}) == 1  # never "0.9" by "0.395"
    assert re.search(r'<td class="num">0\.\d+</td><td class="n">\d+</td>', html)  # score, then its n
    assert "meets or beats" in html and "tie is a win for both" in html


def test_report_figures_are_the_console_figures_and_pass_the_string_scan() -> None:
    html = _report()
    heatmap = figures.heatmap_svg(["alpha", "beta"], ["b1", "b2"],
                                  {("alpha", "b1"): 0.725, ("alpha", "b2"): 0.4, ("beta", "b1"): 0.7,
                                   ("beta", "b2"): None}, title="Benchmark heatmap", missing="suppressed",
                                  digits=3)
    assert heatmap in html
    _, external = strings_of("report.html", html.encode())
    assert external == []
    # Every heading the report writes is fixed text of the export vocabulary (the string scan allows it; the
    # full scan over a real export runs in tests/compliance/test_export.py).
    parser = _Headings()
    parser.feed(html)
    models = {"alpha", "beta"}
    assert [h for h in parser.headings if h not in fixed_text() and h not in models] == []
