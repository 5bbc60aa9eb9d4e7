"""Rendering published aggregates: JSON, CSV and one self-contained HTML report with inline SVG charts.

The HTML loads nothing (a Content-Security-Policy forbids it): no scripts, fonts, images or style sheets
from anywhere. Every value sits in its own element so the string scan sees it exactly as published.
"""

from __future__ import annotations

import csv
import io
import json
from html import escape

from medhelm_local.export.aggregates import ExportAggregates, PublishedCell, PublishedModel

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; script-src 'none'"
TITLE = "MedHELM-local evaluation export"
SECTIONS = {
    "leaderboard": "Leaderboard",
    "heatmap": "Benchmark heatmap",
    "categories": "Category scores",
    "scatter": "Cost and performance",
    "cells": "Per-run aggregates",
    "runs": "Runs",
    "notes": "Notes",
}
LABELS = {
    "request": "Request", "generated": "Generated (UTC)", "version": "Appliance version", "policy": "Policy sha256",
    "min_cell": "Minimum cell size", "no_cost": "No cost available: no pricing is configured for these models.",
    "no_scores": "No published scores.", "suppressed": "suppressed", "macro_axis": "Macro-average score",
    "cost_axis": "Estimated cost",
}
LEADERBOARD_COLUMNS = ["rank", "model", "win_rate", "macro_avg", "cost", "benchmarks_published",
                       "benchmarks_suppressed"]
CELL_COLUMNS = ["run_id", "model", "benchmark", "category", "metric", "score", "n_scored", "n_failed", "n_total",
                "n_gold_empty", "score_nonempty_gold", "suppressed"]
CATEGORY_COLUMNS = ["model", "category", "score"]
RUN_COLUMNS = ["run_id", "model", "prompt_style", "status", "manifest_sha256"]
PALETTE = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]


def fixed_text() -> set[str]:
    """Every literal string the renderers write: part of the export vocabulary."""
    return {TITLE, *SECTIONS.values(), *LABELS.values(), *LEADERBOARD_COLUMNS, *CELL_COLUMNS, *CATEGORY_COLUMNS,
            *RUN_COLUMNS, "-"}


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


def _cell(value: object, tag: str = "td") -> str:
    return f"<{tag}>{escape(_fmt(value))}</{tag}>"


def _table(columns: list[str], rows: list[list[object]]) -> str:
    head = "".join(_cell(c, "th") for c in columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _color(value: float, low: float, high: float) -> str:
    t = 0.0 if high <= low else max(0.0, min(1.0, (value - low) / (high - low)))
    start, end = (247, 251, 255), (8, 48, 107)
    r, g, b = (round(s + (e - s) * t) for s, e in zip(start, end, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _text(x: float, y: float, value: str, *, anchor: str = "start", size: int = 11, fill: str = "#222",
          rotate: int = 0) -> str:
    transform = f' transform="rotate({-rotate} {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{transform}>'
            f"{escape(value)}</text>")


def heatmap_svg(data: ExportAggregates) -> str:
    models = [m.model for m in data.models]
    latest: dict[tuple[str, str], PublishedCell] = {}
    for cell in data.cells:
        latest[(cell.model, cell.benchmark)] = cell
    benchmarks = sorted({c.benchmark for c in data.cells})
    if not models or not benchmarks:
        return f"<p>{escape(LABELS['no_scores'])}</p>"
    scores = [c.score for c in latest.values() if c.score is not None]
    low, high = (0.0, 1.0) if all(0 <= s <= 1 for s in scores) else (min(scores, default=0), max(scores, default=1))
    cw, ch, left, top = 70, 28, 180, 110
    width, height = left + cw * len(benchmarks) + 140, top + ch * len(models) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for j, benchmark in enumerate(benchmarks):
        parts.append(_text(left + j * cw + cw / 2, top - 8, benchmark, rotate=40))
    for i, model in enumerate(models):
        y = top + i * ch
        parts.append(_text(left - 8, y + ch / 2 + 4, model, anchor="end"))
        for j, benchmark in enumerate(benchmarks):
            x = left + j * cw
            found = latest.get((model, benchmark))
            if found is None:
                continue
            cell = found
            if cell.score is None:
                parts.append(f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="#dddddd"/>')
                parts.append(_text(x + cw / 2, y + ch / 2 + 4, LABELS["suppressed"], anchor="middle", size=9,
                                   fill="#555"))
                continue
            fill = _color(cell.score, low, high)
            dark = (cell.score - low) / ((high - low) or 1) > 0.55
            parts.append(f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="{fill}"/>')
            parts.append(_text(x + cw / 2, y + ch / 2 + 4, f"{cell.score}", anchor="middle",
                               fill="#ffffff" if dark else "#111111"))
    parts.append("</svg>")
    return "".join(parts)


def categories_svg(models: list[PublishedModel]) -> str:
    categories = sorted({c for m in models for c in m.category_scores})
    if not categories:
        return f"<p>{escape(LABELS['no_scores'])}</p>"
    values = [v for m in models for v in m.category_scores.values() if v is not None]
    high = max(1.0, max(values, default=1.0))
    bar, gap, left, chart_w = 14, 10, 230, 360
    group = bar * len(models) + gap
    height = 40 + group * len(categories) + 20 * len(models)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + chart_w + 80}" height="{height}" role="img">']
    for ci, category in enumerate(categories):
        y0 = 20 + ci * group
        parts.append(_text(left - 8, y0 + bar * len(models) / 2 + 4, category, anchor="end"))
        for mi, model in enumerate(models):
            value = model.category_scores.get(category)
            if value is None:
                continue
            w = chart_w * max(0.0, value) / high
            y = y0 + mi * bar
            parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" '
                         f'fill="{PALETTE[mi % len(PALETTE)]}"/>')
            parts.append(_text(left + w + 4, y + bar - 4, f"{value}", size=10))
    legend_y = 30 + group * len(categories)
    for mi, model in enumerate(models):
        y = legend_y + mi * 20
        parts.append(f'<rect x="{left}" y="{y - 10}" width="12" height="12" fill="{PALETTE[mi % len(PALETTE)]}"/>')
        parts.append(_text(left + 18, y, model.model))
    parts.append("</svg>")
    return "".join(parts)


def scatter_svg(models: list[PublishedModel]) -> str:
    points = [(m.model, m.cost, m.macro_avg) for m in models if m.cost is not None and m.macro_avg is not None]
    if not points:
        return f"<p>{escape(LABELS['no_cost'])}</p>"
    left, top, w, h = 70, 20, 420, 260
    max_cost = max(p[1] for p in points) or 1.0
    max_score = max(1.0, max(p[2] for p in points))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + w + 180}" height="{top + h + 60}" role="img">',
             f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#333"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#333"/>',
             _text(left + w / 2, top + h + 40, LABELS["cost_axis"], anchor="middle"),
             _text(left - 50, top + h / 2, LABELS["macro_axis"], anchor="middle", rotate=90),
             _text(left, top + h + 16, "0", anchor="middle", size=10),
             _text(left + w, top + h + 16, f"{max_cost}", anchor="middle", size=10),
             _text(left - 6, top + 4, f"{max_score}", anchor="end", size=10)]
    for index, (model, cost, score) in enumerate(points):
        x = left + w * cost / max_cost
        y = top + h - h * max(0.0, score) / max_score
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{PALETTE[index % len(PALETTE)]}"/>')
        parts.append(_text(x + 9, y + 4, model, size=10))
    parts.append("</svg>")
    return "".join(parts)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; }
th { background: #f2f2f2; }
dt { font-weight: 600; } dd { margin: 0 0 0.4rem 0; }
code { font-size: 0.85rem; }
"""


def render_html(data: ExportAggregates) -> str:
    models = data.models
    meta = "".join(
        f"<dt>{escape(LABELS[key])}</dt><dd><code>{escape(str(value))}</code></dd>"
        for key, value in (("request", data.request_id), ("generated", data.generated_at),
                           ("version", data.appliance_version), ("policy", data.policy_sha256),
                           ("min_cell", data.min_cell_size))
    )
    body = [
        f"<h1>{escape(TITLE)}</h1><dl>{meta}</dl>",
        f"<h2>{escape(SECTIONS['leaderboard'])}</h2>",
        _table(LEADERBOARD_COLUMNS, [[getattr(m, c) for c in LEADERBOARD_COLUMNS] for m in models]),
        f"<h2>{escape(SECTIONS['heatmap'])}</h2>", heatmap_svg(data),
        f"<h2>{escape(SECTIONS['categories'])}</h2>", categories_svg(models),
        f"<h2>{escape(SECTIONS['scatter'])}</h2>", scatter_svg(models),
        f"<h2>{escape(SECTIONS['cells'])}</h2>",
        _table(CELL_COLUMNS, [[*(getattr(c, k) for k in CELL_COLUMNS[:-1]), suppressed_text(c)] for c in data.cells]),
        f"<h2>{escape(SECTIONS['runs'])}</h2>",
        _table(RUN_COLUMNS, [[r.run_id, r.model, r.prompt_style, r.status, r.manifest_sha256] for r in data.runs]),
        f"<h2>{escape(SECTIONS['notes'])}</h2>",
        "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in data.notes) + "</ul>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(TITLE)}</title><style>{STYLE}</style></head><body>"
        + "\n".join(body) + "</body></html>\n"
    )
