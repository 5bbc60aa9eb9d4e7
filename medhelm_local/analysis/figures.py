"""The leaderboard's figures as inline SVG (no script, no font, nothing loaded): the benchmark heatmap, category
means and the cost-performance scatter, as MedHELM's paper draws them (scores on a 0-1 colour scale with a legend,
axes with ticks, the cost / win-rate Pareto front). :func:`leaderboard_figures` is the one place they are computed:
the web console's leaderboard and the exported report both call it, with plain values (the console with the
store's scores, an export with its published, rounded ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from medhelm_local.formatting import money

PALETTE = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]


def fmt(value: float | None, digits: int = 3) -> str:
    """One number format everywhere: fixed decimals, a dash for no value."""
    return "-" if value is None else f"{value:.{digits}f}"


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


def _ticks(high: float, count: int = 4) -> list[float]:
    return [high * i / count for i in range(count + 1)]


def _legend_bar(x: float, y: float, width: float, low: float, high: float, digits: int) -> str:
    """The heatmap's colour scale: a bar of steps from ``low`` to ``high`` with its end and middle values."""
    steps = 20
    parts = [f'<rect x="{x + width * i / steps:.1f}" y="{y}" width="{width / steps + 0.5:.1f}" height="10" '
             f'fill="{_color(low + (high - low) * (i + 0.5) / steps, low, high)}"/>' for i in range(steps)]
    parts.append(f'<rect x="{x}" y="{y}" width="{width}" height="10" fill="none" stroke="#888"/>')
    for t in (0.0, 0.5, 1.0):
        parts.append(_text(x + width * t, y + 24, fmt(low + (high - low) * t, digits if t else max(1, digits - 1)),
                           anchor="middle", size=10))
    return "".join(parts)


def heatmap_svg(models: Sequence[str], benchmarks: Sequence[str],
                scores: Mapping[tuple[str, str], float | None], *, title: str = "Benchmark heatmap",
                missing: str = "suppressed", empty: str = "No scores.", digits: int = 3,
                cell_digits: Mapping[tuple[str, str], int] | None = None) -> str:
    """Models (rows) x benchmarks (columns), each cell coloured on the score scale (0-1 for scores in 0-1) and
    labelled with its value (with ``digits`` decimals, or the cell's own in ``cell_digits``), a colour legend
    below; a cell with a None score is drawn grey with ``missing``."""
    if not models or not benchmarks:
        return f"<p>{escape(empty)}</p>"
    values = [v for v in scores.values() if v is not None]
    low, high = (0.0, 1.0) if all(0 <= v <= 1 for v in values) else (min(values, default=0), max(values, default=1))
    longest = max(len(m) for m in models)
    tallest = max(len(b) for b in benchmarks)
    cw, ch = max(96, min(150, 720 // len(benchmarks))), 38  # few benchmarks: wider cells, never a thumbnail
    left, top = min(70 + 7 * longest, 340), min(40 + 6 * tallest, 200)
    width = max(left + cw * len(benchmarks) + 60, left + 260)
    height = top + ch * len(models) + 60
    parts = [_open(width, height, title)]
    for j, benchmark in enumerate(benchmarks):
        parts.append(_text(left + j * cw + cw / 2, top - 10, benchmark, rotate=35, size=12))
    for i, model in enumerate(models):
        y = top + i * ch
        parts.append(_text(left - 10, y + ch / 2 + 4, model, anchor="end", size=12))
        for j, benchmark in enumerate(benchmarks):
            if (model, benchmark) not in scores:
                continue
            x = left + j * cw
            score = scores[(model, benchmark)]
            if score is None:
                parts.append(f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="#dddddd"/>')
                parts.append(_text(x + cw / 2, y + ch / 2 + 4, missing, anchor="middle", size=10, fill="#555"))
                continue
            dark = (score - low) / ((high - low) or 1) > 0.55
            parts.append(f'<rect x="{x}" y="{y}" width="{cw - 2}" height="{ch - 2}" '
                         f'fill="{_color(score, low, high)}"/>')
            label = fmt(score, (cell_digits or {}).get((model, benchmark), digits))
            parts.append(_text(x + cw / 2, y + ch / 2 + 5, label, anchor="middle", size=13,
                               fill="#ffffff" if dark else "#111111"))
    parts.append(_legend_bar(left, top + ch * len(models) + 16, 220, low, high, digits))
    parts.append("</svg>")
    return "".join(parts)


def category_bars_svg(models: Sequence[str], categories: Sequence[str],
                      means: Mapping[tuple[str, str], float | None], *, title: str = "Category means",
                      empty: str = "No scores.", digits: int = 3,
                      intervals: Mapping[tuple[str, str], tuple[float, float]] | None = None) -> str:
    """Grouped horizontal bars: per category, one bar per model (its mean over the category's benchmarks), on a
    0-1 axis with ticks and grid lines, the 95% CI as a whisker where ``intervals`` has one, a legend of the
    models below."""
    intervals = intervals or {}
    if not categories or not models:
        return f"<p>{escape(empty)}</p>"
    values = [v for v in means.values() if v is not None]
    high = max(1.0, max(values, default=1.0))
    bar, gap, chart_w = 18, 16, 420
    left = min(40 + 7 * max(len(c) for c in categories), 300)
    group = bar * len(models) + gap
    axis_y = 16 + group * len(categories)
    height = axis_y + 40 + 22 * len(models)
    parts = [_open(left + chart_w + 90, height, title)]
    for tick in _ticks(high):
        x = left + chart_w * tick / high
        parts.append(f'<line x1="{x:.1f}" y1="10" x2="{x:.1f}" y2="{axis_y}" stroke="#e3e7ec"/>')
        parts.append(_text(x, axis_y + 14, fmt(tick, 2), anchor="middle", size=10))
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + chart_w}" y2="{axis_y}" stroke="#333"/>')
    for ci, category in enumerate(categories):
        y0 = 16 + ci * group
        parts.append(_text(left - 8, y0 + bar * len(models) / 2 + 4, category, anchor="end", size=12))
        for mi, model in enumerate(models):
            value = means.get((model, category))
            if value is None:
                continue
            w = chart_w * max(0.0, value) / high
            y = y0 + mi * bar
            parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" '
                         f'fill="{PALETTE[mi % len(PALETTE)]}"/>')
            label_x = left + w + 4
            interval = intervals.get((model, category))
            if interval is not None:
                x0, x1 = (left + chart_w * max(0.0, v) / high for v in interval)
                mid = y + (bar - 2) / 2
                parts.append(f'<path d="M{x0:.1f} {mid - 4:.1f}V{mid + 4:.1f}M{x0:.1f} {mid:.1f}H{x1:.1f}'
                             f'M{x1:.1f} {mid - 4:.1f}V{mid + 4:.1f}" stroke="#222" fill="none"/>')
                label_x = max(label_x, x1 + 4)
            parts.append(_text(label_x, y + bar - 5, fmt(value, digits), size=11))
    legend_y = axis_y + 36
    for mi, model in enumerate(models):
        y = legend_y + mi * 22
        parts.append(f'<rect x="{left}" y="{y - 10}" width="12" height="12" fill="{PALETTE[mi % len(PALETTE)]}"/>')
        parts.append(_text(left + 18, y, model, size=12))
    parts.append("</svg>")
    return "".join(parts)


def cost_scatter_svg(points: Sequence[tuple[str, float, float]], *, pareto: set[str] | None = None,
                     score_label: str = "Win rate", cost_label: str = "Estimated cost",
                     title: str = "Cost and performance", empty: str = "No cost available.",
                     front_label: str = "ringed and joined: the cost / win-rate Pareto front") -> str:
    """(model, cost, score) points on axes with ticks and grid lines; models on the Pareto front are ringed and
    joined by a dashed line."""
    if not points:
        return f"<p>{escape(empty)}</p>"
    pareto = pareto or set()
    left, top, w, h = 80, 20, 460, 280
    max_cost = max(p[1] for p in points) or 1.0
    max_score = max(1.0, max(p[2] for p in points))
    parts = [_open(left + w + 220, top + h + 80, title)]
    for tick in _ticks(max_score):
        y = top + h - h * tick / max_score
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + w}" y2="{y:.1f}" stroke="#e3e7ec"/>')
        parts.append(_text(left - 6, y + 4, fmt(tick, 2), anchor="end", size=10))
    for tick in _ticks(max_cost):
        x = left + w * tick / max_cost
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + h}" stroke="#e3e7ec"/>')
        parts.append(_text(x, top + h + 16, "0" if tick == 0 else money(tick, decimals=0), anchor="middle", size=10))
    parts += [f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#333"/>',
              f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#333"/>',
              _text(left + w / 2, top + h + 40, cost_label, anchor="middle", size=12),
              _text(left - 55, top + h / 2, score_label, anchor="middle", rotate=90, size=12)]

    def where(cost: float, score: float) -> tuple[float, float]:
        return left + w * cost / max_cost, top + h - h * max(0.0, score) / max_score

    front = sorted((p for p in points if p[0] in pareto), key=lambda p: (p[1], p[2]))
    if len(front) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (where(c, s) for _, c, s in front))
        parts.append(f'<polyline points="{path}" fill="none" stroke="#111" stroke-dasharray="4 3"/>')
    for index, (model, cost, score) in enumerate(points):
        x, y = where(cost, score)
        if model in pareto:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="10" fill="none" stroke="#111" stroke-width="1.5"/>')
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{PALETTE[index % len(PALETTE)]}"/>')
        parts.append(_text(x + 12, y + 4, model, size=11))
    if pareto:
        parts.append(_text(left, top + h + 62, front_label, size=11, fill="#444"))
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class FigureText:
    """The words the figures write (an export's report passes its own fixed vocabulary)."""

    heatmap: str = "Benchmark heatmap"
    categories: str = "Category means"
    scatter: str = "Cost and performance"
    missing: str = "no score"
    no_scores: str = "No scores."
    no_cost: str = "No cost available: configure pricing for the models in appliance.yaml."
    no_point: str = "No model has both a cost and a score to plot."  # costs known, but no score beside them
    score_axis: str = "Win rate"
    cost_axis: str = "Estimated cost"
    front: str = "ringed and joined: the cost / win-rate Pareto front"
    macro_axis: str = "Macro average (a single model: no win rate)"
    macro_front: str = "ringed: the cost / macro-average Pareto front"


@dataclass(frozen=True)
class LeaderboardFigures:
    heatmap: str
    categories: str
    scatter: str
    scatter_left_out: tuple[str, ...] = ()  # models the scatter (and its Pareto front) has no point for


def leaderboard_figures(models: Sequence[str], benchmarks: Sequence[str],
                        scores: Mapping[tuple[str, str], float | None],
                        category_means: Mapping[tuple[str, str], float | None],
                        win_rates: Mapping[str, float | None], costs: Mapping[str, float | None], *,
                        macro_avgs: Mapping[str, float | None] | None = None, digits: int = 3,
                        text: FigureText | None = None,
                        category_intervals: Mapping[tuple[str, str], tuple[float, float]] | None = None,
                        cell_digits: Mapping[tuple[str, str], int] | None = None) -> LeaderboardFigures:
    """The leaderboard's three figures from its values: the benchmark heatmap (models in ``models`` order x
    ``benchmarks``), category means (with their 95% CIs as whiskers where ``category_intervals`` has them), and
    cost against win rate with the Pareto front (MedHELM's figures). With a
    single model there is no win rate: its cost is plotted against its macro average (``macro_avgs``), said on the
    axis."""
    from medhelm_local.analysis.cost_performance import pareto_front

    text = text or FigureText()
    categories = sorted({c for _, c in category_means})
    points = [(m, float(c), float(r)) for m in models
              if (c := costs.get(m)) is not None and (r := win_rates.get(m)) is not None]
    axis, front_label = text.score_axis, text.front
    if not points and macro_avgs:
        points = [(m, float(c), float(a)) for m in models
                  if (c := costs.get(m)) is not None and (a := macro_avgs.get(m)) is not None]
        axis, front_label = text.macro_axis, text.macro_front
    front = pareto_front({m: (c, r) for m, c, r in points})
    return LeaderboardFigures(
        heatmap=heatmap_svg(models, benchmarks, scores, title=text.heatmap, missing=text.missing,
                            empty=text.no_scores, digits=digits, cell_digits=cell_digits),
        categories=category_bars_svg(models, categories, category_means, title=text.categories,
                                     empty=text.no_scores, digits=digits, intervals=category_intervals),
        scatter=cost_scatter_svg(points, pareto=front, score_label=axis, cost_label=text.cost_axis,
                                 title=text.scatter, front_label=front_label,
                                 empty=text.no_point if any(costs.get(m) is not None for m in models)
                                 else text.no_cost),
        scatter_left_out=tuple(m for m in models if m not in {p[0] for p in points}),
    )
