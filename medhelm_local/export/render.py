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
from medhelm_local.export.aggregates import ExportAggregates, PublishedCell, PublishedModel

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; script-src 'none'"
TITLE = "MedHELM-local evaluation export"
SECTIONS = {
    "leaderboard": "Leaderboard",
    "scores": "Scores by benchmark",
    "heatmap": "Benchmark heatmap",
    "categories": "Category scores",
    "scatter": "Cost and performance",
    "cells": "Per-run aggregates",
    "runs": "Runs",
    "notes": "Notes",
}
# Column headings of the HTML report (the CSV files keep the machine names).
HEADINGS = {
    "rank": "Rank", "model": "Model", "win_rate": "Win rate", "macro_avg": "Macro average", "cost": "Estimated cost",
    "benchmarks_published": "Benchmarks published", "benchmarks_suppressed": "Benchmarks suppressed",
    "run_id": "Run", "benchmark": "Benchmark", "category": "Category", "metric": "Metric", "score": "Score",
    "n_scored": "n scored", "n_failed": "n failed", "n_total": "n total", "n_gold_empty": "n empty gold",
    "score_nonempty_gold": "Score on non-empty gold", "suppressed": "Suppressed", "prompt_style": "Prompt style",
    "status": "Status", "manifest_sha256": "Manifest sha256",
}
LABELS = {
    "request": "Request", "generated": "Generated (UTC)", "version": "Appliance version", "policy": "Policy sha256",
    "min_cell": "Minimum cell size", "no_cost": "No cost available: no pricing is configured for these models.",
    "no_scores": "No published scores.", "suppressed": "suppressed", "macro_axis": "Macro-average score",
    "cost_axis": "Estimated cost",
    "win_rule": "Win rate follows MedHELM's rule: on each benchmark a model wins against every rival whose published "
                "score it meets or beats (a tie is a win for both); the win rate is the share of wins over all "
                "(benchmark, rival) pairs. Suppressed scores take no part. Macro average: the mean of the model's "
                "published benchmark scores, each benchmark weighted equally.",
    "scores_note": "Each score is shown with n, the number of scored instances behind it; failed requests are "
                   "counted apart (n failed), never scored as zero.",
}
LEADERBOARD_COLUMNS = ["rank", "model", "win_rate", "macro_avg", "cost", "benchmarks_published",
                       "benchmarks_suppressed"]
CELL_COLUMNS = ["run_id", "model", "benchmark", "category", "metric", "score", "n_scored", "n_failed", "n_total",
                "n_gold_empty", "score_nonempty_gold", "suppressed"]
CATEGORY_COLUMNS = ["model", "category", "score"]
RUN_COLUMNS = ["run_id", "model", "prompt_style", "status", "manifest_sha256"]


def fixed_text() -> set[str]:
    """Every literal string the renderers write: part of the export vocabulary."""
    return {TITLE, *SECTIONS.values(), *LABELS.values(), *HEADINGS.values(), *LEADERBOARD_COLUMNS, *CELL_COLUMNS,
            *CATEGORY_COLUMNS, *RUN_COLUMNS, "-", "n"}


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
        "categories.csv": _csv(CATEGORY_COLUMNS, [[m.model, c, s] for m in data.models
                                                  for c, s in m.category_scores.items()]),
        "cells.csv": _csv(CELL_COLUMNS, [[*(getattr(c, k) for k in CELL_COLUMNS[:-1]), suppressed_text(c)]
                                         for c in data.cells]),
        "report.html": render_html(data).encode("utf-8"),
    }


# -- HTML -----------------------------------------------------------------------------------------------------


def score_digits(data: ExportAggregates) -> int:
    """The decimals the published scores carry (the policy's rounding): every score is printed with as many."""
    digits = 0
    values = [c.score for c in data.cells] + [m.win_rate for m in data.models] + [m.macro_avg for m in data.models]
    for value in values:
        if value is not None:
            text = repr(float(value))
            digits = max(digits, len(text.split(".")[1]) if "." in text and "e" not in text else 3)
    return min(max(digits, 1), 6)


def _latest_cells(data: ExportAggregates) -> dict[tuple[str, str], PublishedCell]:
    latest: dict[tuple[str, str], PublishedCell] = {}
    for cell in data.cells:
        latest[(cell.model, cell.benchmark)] = cell
    return latest


def heatmap_svg(data: ExportAggregates) -> str:
    """The benchmark heatmap: the same figure as the console's leaderboard (:mod:`analysis.figures`)."""
    latest = _latest_cells(data)
    return figures.heatmap_svg([m.model for m in data.models], sorted({c.benchmark for c in data.cells}),
                               {k: c.score for k, c in latest.items()}, title=SECTIONS["heatmap"],
                               missing=LABELS["suppressed"], empty=LABELS["no_scores"], digits=score_digits(data))


def categories_svg(models: list[PublishedModel], digits: int = 3) -> str:
    categories = sorted({c for m in models for c in m.category_scores})
    return figures.category_bars_svg([m.model for m in models], categories,
                                     {(m.model, c): v for m in models for c, v in m.category_scores.items()},
                                     title=SECTIONS["categories"], empty=LABELS["no_scores"], digits=digits)


def scatter_svg(models: list[PublishedModel]) -> str:
    points = [(m.model, m.cost, m.macro_avg) for m in models if m.cost is not None and m.macro_avg is not None]
    return figures.cost_scatter_svg(points, score_label=LABELS["macro_axis"], cost_label=LABELS["cost_axis"],
                                    title=SECTIONS["scatter"], empty=LABELS["no_cost"])


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #1d2733; line-height: 1.4; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d6dde5; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #d6dde5; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f3f6f9; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.n, th.n { color: #5b6775; text-align: right; font-size: 0.85em; }
p.note { color: #5b6775; max-width: 60rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dt { font-weight: 600; } dd { margin: 0; }
code { font-size: 0.85rem; }
svg { max-width: 100%; height: auto; }
@media print { body { margin: 0; max-width: none; } h2 { page-break-after: avoid; } tr { page-break-inside: avoid; } }
"""


def _value(value: object, digits: int) -> str:
    """Scores with the published decimals throughout (never "0.0" beside "0.395"); counts as integers."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return figures.fmt(value, digits)
    return str(value)


def _html_table(keys: list[str], rows: list[list[object]], digits: int, *, numeric: set[str]) -> str:
    head = "".join(f"<th>{escape(HEADINGS[k])}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{escape(_value(v, digits))}</td>' if k in numeric
                         else f"<td>{escape(_value(v, digits))}</td>" for k, v in zip(keys, row, strict=True))
        + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _scores_table(data: ExportAggregates, digits: int) -> str:
    """Benchmarks x models: each published score with its n scored beside it."""
    latest = _latest_cells(data)
    models = [m.model for m in data.models]
    head = (f"<tr><th>{escape(HEADINGS['benchmark'])}</th><th>{escape(HEADINGS['metric'])}</th>"
            + "".join(f'<th colspan="2">{escape(m)}</th>' for m in models) + "</tr><tr><th></th><th></th>"
            + "".join(f'<th>{escape(HEADINGS["score"])}</th><th class="n">n</th>' for _ in models) + "</tr>")
    rows = []
    for benchmark in sorted({c.benchmark for c in data.cells}):
        cells = [latest.get((m, benchmark)) for m in models]
        metric = next((c.metric for c in cells if c is not None), "")
        tds = ""
        for cell in cells:
            if cell is None:
                tds += '<td class="num">-</td><td class="n">-</td>'
            elif cell.score is None:
                tds += (f'<td class="num">{escape(LABELS["suppressed"])}</td>'
                        f'<td class="n">{escape(_value(cell.n_scored, digits))}</td>')
            else:
                tds += (f'<td class="num">{escape(figures.fmt(cell.score, digits))}</td>'
                        f'<td class="n">{escape(_value(cell.n_scored, digits))}</td>')
        rows.append(f"<tr><td>{escape(benchmark)}</td><td>{escape(metric)}</td>{tds}</tr>")
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


LEADERBOARD_NUMERIC = {"rank", "win_rate", "macro_avg", "cost", "benchmarks_published", "benchmarks_suppressed"}
CELL_NUMERIC = {"score", "n_scored", "n_failed", "n_total", "n_gold_empty", "score_nonempty_gold"}


def render_html(data: ExportAggregates) -> str:
    models = data.models
    digits = score_digits(data)
    meta = "".join(
        f"<dt>{escape(LABELS[key])}</dt><dd><code>{escape(str(value))}</code></dd>"
        for key, value in (("request", data.request_id), ("generated", data.generated_at),
                           ("version", data.appliance_version), ("policy", data.policy_sha256),
                           ("min_cell", data.min_cell_size))
    )
    leaderboard_rows = [[getattr(m, c) for c in LEADERBOARD_COLUMNS] for m in models]
    for row in leaderboard_rows:  # costs keep their own (policy) rounding
        index = LEADERBOARD_COLUMNS.index("cost")
        row[index] = None if row[index] is None else figures.money(float(str(row[index])))
    body = [
        f"<h1>{escape(TITLE)}</h1><dl>{meta}</dl>",
        f"<h2>{escape(SECTIONS['leaderboard'])}</h2>",
        _html_table(LEADERBOARD_COLUMNS, leaderboard_rows, digits, numeric=LEADERBOARD_NUMERIC),
        f'<p class="note">{escape(LABELS["win_rule"])}</p>',
        f"<h2>{escape(SECTIONS['scores'])}</h2>", _scores_table(data, digits),
        f'<p class="note">{escape(LABELS["scores_note"])}</p>',
        f"<h2>{escape(SECTIONS['heatmap'])}</h2>", heatmap_svg(data),
        f"<h2>{escape(SECTIONS['categories'])}</h2>", categories_svg(models, digits),
        f"<h2>{escape(SECTIONS['scatter'])}</h2>", scatter_svg(models),
        f"<h2>{escape(SECTIONS['cells'])}</h2>",
        _html_table(CELL_COLUMNS, [[*(getattr(c, k) for k in CELL_COLUMNS[:-1]), suppressed_text(c) or None]
                                   for c in data.cells], digits, numeric=CELL_NUMERIC),
        f"<h2>{escape(SECTIONS['runs'])}</h2>",
        _html_table(RUN_COLUMNS, [[r.run_id, r.model, r.prompt_style, r.status, r.manifest_sha256]
                                  for r in data.runs], digits, numeric=set()),
        f"<h2>{escape(SECTIONS['notes'])}</h2>",
        "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in data.notes) + "</ul>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(TITLE)}</title><style>{STYLE}</style></head><body>"
        + "\n".join(body) + "</body></html>\n"
    )
