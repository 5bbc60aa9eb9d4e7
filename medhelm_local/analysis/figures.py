"""The leaderboard's figures as inline SVG (no script, no font, nothing loaded): the benchmark heatmap, category
means and the cost-performance scatter. The web console's leaderboard draws them; they take plain values, so an
export's aggregates can be drawn by the same code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

PALETTE = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]


def fmt(value: float | None, digits: int = 3) -> str:
    """One number format everywhere: fixed decimals, a dash for no value."""
    return "-" if value is None else f"{value:.{digits}f}"


def money(value: float | None) -> str:
    """A cost: four significant digits, so that small evaluation costs do not print as 0.00."""
    return "-" if value is None else f"{value:.4g}"


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


def _open(width: float, height: float, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(title)}">'
            f"<title>{escape(title)}</title>")


def heatmap_svg(models: Sequence[str], benchmarks: Sequence[str],
                scores: Mapping[tuple[str, str], float | None], *, title: str = "Benchmark heatmap",
                missing: str = "suppressed", empty: str = "No scores.", digits: int = 3) -> str:
    """Models (rows) x benchmarks (columns); a cell with a None score is drawn grey with ``missing``."""
    if not models or not benchmarks:
        return f"<p>{escape(empty)}</p>"
    values = [v for v in scores.values() if v is not None]
    low, high = (0.0, 1.0) if all(0 <= v <= 1 for v in values) else (min(values, default=0), max(values, default=1))
    longest = max(len(m) for m in models)
    cw, ch, left, top = 76, 30, min(60 + 7 * longest, 320), 130
    width, height = left + cw * len(benchmarks) + 40, top + ch * len(models) + 20
    parts = [_open(width, height, title)]
    for j, benchmark in enumerate(benchmarks):
        parts.append(_text(left + j * cw + cw / 2, top - 8, benchmark, rotate=40))
    for i, model in enumerate(models):
        y = top + i * ch
        parts.append(_text(left - 8, y + ch / 2 + 4, model, anchor="end"))
        for j, benchmark in enumerate(benchmarks):
            if (model, benchmark) not in scores:
                continue
            x = left + j * cw
            score = scores[(model, benchmark)]
            if score is None:
                parts.append(f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="#dddddd"/>')
                parts.append(_text(x + cw / 2, y + ch / 2 + 4, missing, anchor="middle", size=9, fill="#555"))
                continue
            dark = (score - low) / ((high - low) or 1) > 0.55
            parts.append(f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" '
                         f'fill="{_color(score, low, high)}"/>')
            parts.append(_text(x + cw / 2, y + ch / 2 + 4, fmt(score, digits), anchor="middle",
                               fill="#ffffff" if dark else "#111111"))
    parts.append("</svg>")
    return "".join(parts)


def category_bars_svg(models: Sequence[str], categories: Sequence[str],
                      means: Mapping[tuple[str, str], float | None], *, title: str = "Category means",
                      empty: str = "No scores.", digits: int = 3) -> str:
    """Grouped horizontal bars: per category, one bar per model (its mean over the category's benchmarks)."""
    if not categories or not models:
        return f"<p>{escape(empty)}</p>"
    values = [v for v in means.values() if v is not None]
    high = max(1.0, max(values, default=1.0))
    bar, gap, left, chart_w = 16, 14, 260, 380
    group = bar * len(models) + gap
    height = 30 + group * len(categories) + 22 * len(models)
    parts = [_open(left + chart_w + 90, height, title)]
    for ci, category in enumerate(categories):
        y0 = 16 + ci * group
        parts.append(_text(left - 8, y0 + bar * len(models) / 2 + 4, category, anchor="end"))
        for mi, model in enumerate(models):
            value = means.get((model, category))
            if value is None:
                continue
            w = chart_w * max(0.0, value) / high
            y = y0 + mi * bar
            parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" '
                         f'fill="{PALETTE[mi % len(PALETTE)]}"/>')
            parts.append(_text(left + w + 4, y + bar - 4, fmt(value, digits), size=10))
    legend_y = 26 + group * len(categories)
    for mi, model in enumerate(models):
        y = legend_y + mi * 22
        parts.append(f'<rect x="{left}" y="{y - 10}" width="12" height="12" fill="{PALETTE[mi % len(PALETTE)]}"/>')
        parts.append(_text(left + 18, y, model))
    parts.append("</svg>")
    return "".join(parts)


def cost_scatter_svg(points: Sequence[tuple[str, float, float]], *, pareto: set[str] | None = None,
                     score_label: str = "Win rate", cost_label: str = "Estimated cost",
                     title: str = "Cost and performance", empty: str = "No cost available.") -> str:
    """(model, cost, score) points; models on the Pareto front are ringed."""
    if not points:
        return f"<p>{escape(empty)}</p>"
    pareto = pareto or set()
    left, top, w, h = 80, 20, 440, 260
    max_cost = max(p[1] for p in points) or 1.0
    max_score = max(1.0, max(p[2] for p in points))
    parts = [_open(left + w + 200, top + h + 60, title),
             f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#333"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#333"/>',
             _text(left + w / 2, top + h + 42, cost_label, anchor="middle"),
             _text(left - 55, top + h / 2, score_label, anchor="middle", rotate=90),
             _text(left, top + h + 16, "0", anchor="middle", size=10),
             _text(left + w, top + h + 16, money(max_cost), anchor="middle", size=10),
             _text(left - 6, top + h, "0", anchor="end", size=10),
             _text(left - 6, top + 4, fmt(max_score, 2), anchor="end", size=10)]
    for index, (model, cost, score) in enumerate(points):
        x = left + w * cost / max_cost
        y = top + h - h * max(0.0, score) / max_score
        if model in pareto:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="10" fill="none" stroke="#111" stroke-width="1.5"/>')
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{PALETTE[index % len(PALETTE)]}"/>')
        parts.append(_text(x + 12, y + 4, model, size=10))
    parts.append("</svg>")
    return "".join(parts)
