"""Rendering published aggregates: JSON, CSV and one self-contained HTML report with inline SVG charts.

The HTML loads nothing (a Content-Security-Policy forbids it): no scripts, fonts, images or style sheets
from anywhere. Every value sits in its own element so the string scan sees it exactly as published.
"""

from __future__ import annotations

import csv
import io
import json
from html import escape

from medhelm_local.analysis import figures
from medhelm_local.export.aggregates import ExportAggregates, PublishedCell
from medhelm_local.formatting import money

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; script-src 'none'"
TITLE = "MedHELM-local evaluation export"
SECTIONS = {
    "leaderboard": "Leaderboard",
    "scores": "Scores by benchmark",
    "heatmap": "Benchmark heatmap",
    "categories": "Category means",
    "scatter": "Cost and performance",
    "cells": "Per-run aggregates",
    "runs": "Runs",
    "notes": "Notes",
}
# Column headings of the HTML report (the CSV files keep the machine names).
HEADINGS = {
    "rank": "Rank", "model": "Model", "win_rate": "Win rate", "win_pairs": "n pairs", "macro_avg": "Macro average",
    "cost": "Estimated cost", "benchmarks_published": "n benchmarks", "benchmarks_suppressed": "Benchmarks suppressed",
    "run_id": "Run", "benchmark": "Benchmark", "category": "Category", "metric": "Metric", "score": "Score",
    "ci": "95% CI", "ci_low": "95% CI low", "ci_high": "95% CI high", "mean": "Mean",
    "n_scored": "n scored", "n_failed": "n failed", "n_total": "n total", "n_gold_empty": "n empty gold",
    "score_nonempty_gold": "Score on non-empty gold", "suppressed": "Suppressed", "prompt_style": "Prompt style",
    "status": "Status", "manifest_sha256": "Manifest sha256",
}
LABELS = {
    "request": "Request", "generated": "Generated (UTC)", "version": "Appliance version", "policy": "Policy sha256",
    "min_cell": "Minimum cell size", "no_cost": "No cost available: no pricing is configured for these models.",
    "no_point": "No model has both a published cost and a published score to plot.",
    "no_scores": "No published scores.", "suppressed": "suppressed", "win_axis": "Win rate",
    "cost_axis": "Estimated cost", "front": "ringed and joined: the cost / win-rate Pareto front",
    "macro_axis": "Macro average (a single model: no win rate)",
    "macro_front": "ringed: the cost / macro-average Pareto front",
    "win_rule": "Win rate follows MedHELM's rule: on each benchmark a model wins against every rival whose published "
                "score it meets or beats (a tie is a win for both); the win rate is the share of wins over all "
                "(benchmark, rival) pairs, n pairs. Suppressed scores take no part. Macro average: the mean of the "
                "model's published benchmark scores, each benchmark weighted equally, over n benchmarks. Their 95% "
                "CIs: the win rate and the average recomputed on 1000 bootstrap resamples of each benchmark's scored "
                "instances (rivals on the same resamples). A model with no win rate has no rank (-): it has no "
                "published score, or no rival with a published score on the same benchmark; it is listed last.",
    "scores_note": "Each score is shown with its 95% confidence interval (percentile bootstrap over the scored "
                   "instances, 1000 resamples) and n, the number of scored instances behind it; failed requests "
                   "are counted apart (n failed), never scored as zero. A suppressed score shows neither.",
    "scatter_note": "Estimated cost from measured usage under the configured pricing, against the win rate (the "
                    "macro average where a single model has no win rate).",
}
# Why a value is withheld, in words (``field:reason`` markers of aggregates.json, spelled out in the report).
SUPPRESSED_FIELDS = {"cell": "Cell", "score": "Score", "ci": "95% CI", "n_scored": "n scored", "n_failed": "n failed",
                     "n_gold_empty": "n empty gold", "score_nonempty_gold": "Score on non-empty gold",
                     "win_rate_ci": "Win rate 95% CI", "macro_avg_ci": "Macro average 95% CI",
                     "category_ci": "Category mean 95% CI"}
SUPPRESSED_REASONS = {"small_cell": "below the minimum cell size", "complementary": "complementary suppression",
                      "implied_count": "implies a small count", "score_suppressed": "withheld with its score",
                      "count_rounding": "withheld where counts are rounded",
                      "coarsened": "fewer decimals where counts are rounded",
                      "too_few_instances": "a score behind it has fewer than two instances"}
LEADERBOARD_COLUMNS = ["rank", "model", "win_rate", "win_rate_ci_low", "win_rate_ci_high", "win_pairs", "macro_avg",
                       "macro_avg_ci_low", "macro_avg_ci_high", "cost", "benchmarks_published", "benchmarks_suppressed"]
CELL_COLUMNS = ["run_id", "model", "benchmark", "category", "metric", "score", "ci_low", "ci_high", "n_scored",
                "n_failed", "n_total", "n_gold_empty", "score_nonempty_gold", "suppressed"]
CATEGORY_COLUMNS = ["model", "category", "score", "ci_low", "ci_high", "n_benchmarks"]
RUN_COLUMNS = ["run_id", "model", "prompt_style", "status", "manifest_sha256"]
CI_MARKS = ("[", ",", "]")


def suppression_phrase(marker: str) -> str:
    """``score:small_cell`` -> ``Score: below the minimum cell size``; an unknown marker as it is."""
    field, _, reason = marker.partition(":")
    if field in SUPPRESSED_FIELDS and reason in SUPPRESSED_REASONS:
        return f"{SUPPRESSED_FIELDS[field]}: {SUPPRESSED_REASONS[reason]}"
    return marker


def fixed_text() -> set[str]:
    """Every literal string the renderers write: part of the export vocabulary."""
    phrases = {f"{f}: {r}" for f in SUPPRESSED_FIELDS.values() for r in SUPPRESSED_REASONS.values()}
    return {TITLE, *SECTIONS.values(), *LABELS.values(), *HEADINGS.values(), *LEADERBOARD_COLUMNS, *CELL_COLUMNS,
            *CATEGORY_COLUMNS, *RUN_COLUMNS, *phrases, *CI_MARKS, "-", "n"}


def _fmt(value: object) -> str:
    if value is None:
        return ""
    return str(value)


def _csv(columns: list[str], rows: list[list[object]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([[_fmt(v) for v in row] for row in rows])
    return out.getvalue().encode("utf-8")


def suppressed_text(cell: PublishedCell) -> str:
    return ";".join(cell.suppressed)


def render_files(data: ExportAggregates) -> dict[str, bytes]:
    return {
        "aggregates.json": (json.dumps(data.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode(),
        "leaderboard.csv": _csv(LEADERBOARD_COLUMNS, [[getattr(m, c) for c in LEADERBOARD_COLUMNS]
                                                      for m in data.models]),
        "categories.csv": _csv(CATEGORY_COLUMNS, [[m.model, c, s, m.category_ci_low.get(c), m.category_ci_high.get(c),
                                                   m.category_n.get(c)]
                                                  for m in data.models for c, s in m.category_scores.items()]),
        "cells.csv": _csv(CELL_COLUMNS, [[*(getattr(c, k) for k in CELL_COLUMNS[:-1]), suppressed_text(c)]
                                         for c in data.cells]),
        "report.html": render_html(data).encode("utf-8"),
    }


# -- HTML -----------------------------------------------------------------------------------------------------


def score_digits(data: ExportAggregates) -> int:
    """The decimals the policy rounds scores to: every score, CI and average is printed with as many ("0.480"
    beside "0.395", never "0.48")."""
    return data.score_decimals


def cell_digits(cell: PublishedCell, digits: int) -> int:
    """The decimals ``cell``'s scores are printed with: the policy's, or fewer where the cell was published with
    fewer (count rounding): "0.4", never "0.400", for a score known to one decimal."""
    return digits if cell.score_decimals is None else cell.score_decimals


def _latest_cells(data: ExportAggregates) -> dict[tuple[str, str], PublishedCell]:
    """Each model's cell of each benchmark that its averages and win rate use (its latest run that scored it)."""
    return {(cell.model, cell.benchmark): cell for cell in data.cells if cell.in_leaderboard}


def report_figures(data: ExportAggregates) -> figures.LeaderboardFigures:
    """The console leaderboard's figures (:func:`analysis.figures.leaderboard_figures`), drawn from the published
    values: suppressed scores are grey, categories and win rates use published scores only."""
    latest = _latest_cells(data)
    models = data.models
    text = figures.FigureText(heatmap=SECTIONS["heatmap"], categories=SECTIONS["categories"],
                              scatter=SECTIONS["scatter"], missing=LABELS["suppressed"], no_scores=LABELS["no_scores"],
                              no_cost=LABELS["no_cost"], no_point=LABELS["no_point"], score_axis=LABELS["win_axis"],
                              cost_axis=LABELS["cost_axis"], front=LABELS["front"], macro_axis=LABELS["macro_axis"],
                              macro_front=LABELS["macro_front"])
    return figures.leaderboard_figures(
        [m.model for m in models], sorted({c.benchmark for c in data.cells}),
        {k: c.score for k, c in latest.items()},
        {(m.model, c): v for m in models for c, v in m.category_scores.items()},
        {m.model: m.win_rate for m in models}, {m.model: m.cost for m in models},
        macro_avgs={m.model: m.macro_avg for m in models}, digits=score_digits(data), text=text,
        cell_digits={k: c.score_decimals for k, c in latest.items() if c.score_decimals is not None},
        category_intervals={(m.model, c): (low, high) for m in models for c, low in m.category_ci_low.items()
                            if low is not None and (high := m.category_ci_high.get(c)) is not None})


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 76rem; color: #1d2733; line-height: 1.4; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d6dde5; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #d6dde5; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f3f6f9; }
td.num, td.ci { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.ci { color: #3b4653; }
td.n, th.n { color: #5b6775; text-align: right; font-size: 0.85em; font-variant-numeric: tabular-nums; }
p.note { color: #5b6775; max-width: 60rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dt { font-weight: 600; } dd { margin: 0; }
code { font-size: 0.85rem; }
figure { margin: 0.5rem 0 1.5rem; } svg { max-width: 100%; height: auto; }
@media print { body { margin: 0; max-width: none; } h2 { page-break-after: avoid; }
  tr, figure { page-break-inside: avoid; } }
"""


def _value(value: object, digits: int) -> str:
    """Scores with the published decimals throughout (never "0.0" beside "0.395"); counts as integers."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return figures.fmt(value, digits)
    return str(value)


def _ci(low: float | None, high: float | None, digits: int) -> str:
    """``[low, high]``, each number in its own element (the string scan sees it as published); "-" for none."""
    if low is None or high is None:
        return '<td class="ci">-</td>'
    return (f'<td class="ci">[<span>{escape(figures.fmt(low, digits))}</span>, '
            f'<span>{escape(figures.fmt(high, digits))}</span>]</td>')


def _th(key: str, numeric: bool) -> str:
    return f'<th class="n">{escape(HEADINGS[key])}</th>' if numeric else f"<th>{escape(HEADINGS[key])}</th>"


def _leaderboard_table(data: ExportAggregates, digits: int) -> str:
    cost_digits = data.cost_decimals  # the policy's: "12.50" beside "3.25"
    head = ("<tr>" + "".join(f"<th>{escape(HEADINGS[k])}</th>" for k in ("rank", "model", "win_rate", "ci"))
            + _th("win_pairs", True) + "".join(f"<th>{escape(HEADINGS[k])}</th>" for k in ("macro_avg", "ci"))
            + _th("benchmarks_published", True)
            + "".join(f"<th>{escape(HEADINGS[k])}</th>" for k in ("benchmarks_suppressed", "cost")) + "</tr>")
    rows = []
    for m in data.models:
        rows.append(
            f'<tr><td class="num">{"-" if m.rank is None else m.rank}</td><td>{escape(m.model)}</td>'
            f'<td class="num">{escape(_value(m.win_rate, digits))}</td>'
            + _ci(m.win_rate_ci_low, m.win_rate_ci_high, digits) + f'<td class="n">{m.win_pairs}</td>'
            f'<td class="num">{escape(_value(m.macro_avg, digits))}</td>'
            + _ci(m.macro_avg_ci_low, m.macro_avg_ci_high, digits) + f'<td class="n">{m.benchmarks_published}</td>'
            f'<td class="num">{m.benchmarks_suppressed}</td>'
            f'<td class="num cost">{escape(money(m.cost, decimals=cost_digits))}</td></tr>')
    return f'<table id="leaderboard"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _categories_table(data: ExportAggregates, digits: int) -> str:
    head = ("<tr>" + "".join(f"<th>{escape(HEADINGS[k])}</th>" for k in ("model", "category", "mean", "ci"))
            + _th("benchmarks_published", True) + "</tr>")
    rows = []
    for m in data.models:
        for category, value in m.category_scores.items():
            rows.append(f"<tr><td>{escape(m.model)}</td><td>{escape(category)}</td>"
                        f'<td class="num">{escape(_value(value, digits))}</td>'
                        + _ci(m.category_ci_low.get(category), m.category_ci_high.get(category), digits)
                        + f'<td class="n">{escape(_value(m.category_n.get(category), digits))}</td></tr>')
    return f'<table id="categories"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _scores_table(data: ExportAggregates, digits: int) -> str:
    """Benchmarks x models: each published score with its 95% CI and n scored beside it."""
    latest = _latest_cells(data)
    models = [m.model for m in data.models]
    head = (f"<tr><th>{escape(HEADINGS['benchmark'])}</th><th>{escape(HEADINGS['metric'])}</th>"
            + "".join(f'<th colspan="3">{escape(m)}</th>' for m in models) + "</tr><tr><th></th><th></th>"
            + "".join(f'<th>{escape(HEADINGS["score"])}</th><th>{escape(HEADINGS["ci"])}</th><th class="n">n</th>'
                      for _ in models) + "</tr>")
    rows = []
    for benchmark in sorted({c.benchmark for c in data.cells}):
        cells = [latest.get((m, benchmark)) for m in models]
        metric = next((c.metric for c in cells if c is not None), "")
        tds = ""
        for cell in cells:
            if cell is None:
                tds += '<td class="num">-</td><td class="ci">-</td><td class="n">-</td>'
            elif cell.score is None:  # a suppressed score: its CI and n are not shown beside it either
                tds += f'<td class="num">{escape(LABELS["suppressed"])}</td><td class="ci">-</td><td class="n">-</td>'
            else:
                own = cell_digits(cell, digits)
                tds += (f'<td class="num">{escape(figures.fmt(cell.score, own))}</td>'
                        + _ci(cell.ci_low, cell.ci_high, own)
                        + f'<td class="n">{escape(_value(cell.n_scored, digits))}</td>')
        rows.append(f"<tr><td>{escape(benchmark)}</td><td>{escape(metric)}</td>{tds}</tr>")
    return f'<table id="scores"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


CELL_NUMERIC = {"score", "n_scored", "n_failed", "n_total", "n_gold_empty", "score_nonempty_gold"}
CELL_HTML = ["run_id", "model", "benchmark", "category", "metric", "score", "ci", "n_scored", "n_failed", "n_total",
             "n_gold_empty", "score_nonempty_gold", "suppressed"]


def _cells_table(data: ExportAggregates, digits: int) -> str:
    head = "".join(f"<th>{escape(HEADINGS[k])}</th>" for k in CELL_HTML)
    rows = []
    for cell in data.cells:
        tds = []
        own = cell_digits(cell, digits)
        for key in CELL_HTML:
            if key == "ci":
                tds.append(_ci(cell.ci_low, cell.ci_high, own))
            elif key == "suppressed":
                phrases = [escape(suppression_phrase(m)) for m in cell.suppressed]
                tds.append("<td>" + ("".join(f"<div>{p}</div>" for p in phrases) or "-") + "</td>")
            elif key in CELL_NUMERIC:
                tds.append(f'<td class="num">{escape(_value(getattr(cell, key), own))}</td>')
            else:
                tds.append(f"<td>{escape(_value(getattr(cell, key), digits))}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return f'<table id="cells"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _runs_table(data: ExportAggregates) -> str:
    head = "".join(f"<th>{escape(HEADINGS[k])}</th>" for k in RUN_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(getattr(r, k)))}</td>" for k in RUN_COLUMNS) + "</tr>"
                   for r in data.runs)
    return f'<table id="runs"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def render_html(data: ExportAggregates) -> str:
    digits = score_digits(data)
    meta = "".join(
        f"<dt>{escape(LABELS[key])}</dt><dd><code>{escape(str(value))}</code></dd>"
        for key, value in (("request", data.request_id), ("generated", data.generated_at),
                           ("version", data.appliance_version), ("policy", data.policy_sha256),
                           ("min_cell", data.min_cell_size))
    )
    drawn = report_figures(data)
    body = [
        f"<h1>{escape(TITLE)}</h1><dl>{meta}</dl>",
        f"<h2>{escape(SECTIONS['leaderboard'])}</h2>", _leaderboard_table(data, digits),
        f'<p class="note" id="win-rule">{escape(LABELS["win_rule"])}</p>',
        f"<h2>{escape(SECTIONS['scores'])}</h2>", _scores_table(data, digits),
        f'<p class="note">{escape(LABELS["scores_note"])}</p>',
        f"<h2>{escape(SECTIONS['heatmap'])}</h2>", f'<figure id="fig-heatmap">{drawn.heatmap}</figure>',
        f"<h2>{escape(SECTIONS['categories'])}</h2>", f'<figure id="fig-categories">{drawn.categories}</figure>',
        _categories_table(data, digits),
        f"<h2>{escape(SECTIONS['scatter'])}</h2>", f'<p class="note">{escape(LABELS["scatter_note"])}</p>',
        f'<figure id="fig-scatter">{drawn.scatter}</figure>',
        f"<h2>{escape(SECTIONS['cells'])}</h2>", _cells_table(data, digits),
        f"<h2>{escape(SECTIONS['runs'])}</h2>", _runs_table(data),
        f"<h2>{escape(SECTIONS['notes'])}</h2>",
        "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in data.notes) + "</ul>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(TITLE)}</title><style>{STYLE}</style></head><body>"
        + "\n".join(body) + "</body></html>\n"
    )
