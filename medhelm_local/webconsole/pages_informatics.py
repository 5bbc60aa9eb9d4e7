"""Clinical informatics: the leaderboard and its figures, runs with progress and failures, run and benchmark
detail, and the per-instance view for error analysis (patient-level: every view is audited)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from medhelm_local.analysis.figures import LeaderboardFigures, leaderboard_figures
from medhelm_local.analysis.leaderboard import (
    SD_UNDEFINED,
    SD_UNDEFINED_NOTE,
    UNRANKED,
    WIN_RATE_LEFT_OUT,
    WinRule,
    cost_unknown_why,
)
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.errors import NotFoundError
from medhelm_local.export import intervals
from medhelm_local.home.config import ConsoleRole
from medhelm_local.prompts.styles import DEFAULT_STYLE, PROMPT_STYLES
from medhelm_local.webconsole import data
from medhelm_local.webconsole.app import console_of, identity_of, requires

INFORMATICS = ConsoleRole.INFORMATICS
LIVE_REFRESH_S = 10  # while a run is going, its pages reload themselves (a meta refresh: no script)
FINAL_STATUSES = {"finished", "inferred", "failed", "interrupted"}
WIN_RULES = {WinRule.PAPER: "MedHELM rule: a win when the score is >= the rival's (a tie is a win for both)",
             WinRule.HELM: "HELM rule: a win when the score is > the rival's, half a win for a tie, the "
                           "win fractions of each benchmark averaged (HELM's mean win rate)"}


MAX_PAGE = 10**9  # a page number past any run's items (SQLite takes the offset as a 64-bit integer)


def _choice(request: Request, name: str, allowed: tuple[str, ...], default: str,
            errors: dict[str, str]) -> str:
    """The parameter ``name`` when it is one of ``allowed``; otherwise ``default``, with what is wrong in
    ``errors``."""
    value = request.query_params.get(name, default)
    if value not in allowed:
        errors[name] = f"{name}: expected one of {', '.join(allowed)}"
        return default
    return value


def _bad_parameters(request: Request, errors: dict[str, str], label: str) -> Response:
    """A page asked for with parameters it cannot take: says which and what they take, and leads back to the same
    page without them (the others kept)."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k not in errors]
    back = request.url.path + (f"?{urlencode(kept)}" if kept else "")
    return console_of(request).render(request, "error.html", status_code=400, title="Cannot show this page",
                                      message="; ".join(errors.values()), back=(back, label))


@dataclass(frozen=True)
class SummaryIntervals:
    """95% CIs of a model's win rate, macro average and category means (``export.intervals``, as an export's)."""

    win_rate: tuple[float, float] | None
    macro_avg: tuple[float, float] | None
    categories: dict[str, tuple[float, float] | None]


def summary_intervals(view: data.LeaderboardView, specs: SpecRegistry) -> dict[str, SummaryIntervals]:
    """The summaries recomputed on bootstrap resamples of each benchmark's scored instances (the export's method);
    none for a summary over a benchmark with fewer than two scored instances. A win rate's leaves out the pairings
    its row does (runs not comparable)."""
    draws: dict[str, dict[str, list[float] | None]] = {}
    for series in view.series:
        if len(series.values):
            draws.setdefault(series.model, {})[series.benchmark] = intervals.replicates(series)
    complete = {m: {b: v for b, v in own.items() if v is not None} for m, own in draws.items()
                if all(v is not None for v in own.values())}
    unlike = {(r.model, b): rivals for r in view.rows for b, rivals in r.not_comparable.items()}
    wins = intervals.win_rate_intervals(complete, rule=view.rule, unlike=unlike) if len(view.rows) > 1 and \
        len(complete) == len(draws) else {}
    out = {}
    for model, own in draws.items():
        by_category: dict[str, list[list[float] | None]] = {}
        for benchmark, values in own.items():
            by_category.setdefault(specs.category_of(benchmark), []).append(values)
        categories = {c: None if any(v is None for v in vs) else intervals.mean_interval([v for v in vs if v])
                      for c, vs in sorted(by_category.items())}
        out[model] = SummaryIntervals(
            win_rate=wins.get(model),
            macro_avg=intervals.mean_interval(list(complete[model].values())) if model in complete else None,
            categories=categories)
    return out


def console_figures(view: data.LeaderboardView,
                    summaries: dict[str, SummaryIntervals] | None = None) -> LeaderboardFigures:
    """The leaderboard's figures: the same function as the exported report's (``analysis.figures``)."""
    summaries = summaries or {}
    return leaderboard_figures(
        [r.model for r in view.rows], view.benchmarks,
        {(r.model, b): s.score for r in view.rows for b, s in r.benchmarks.items()},
        {(r.model, c): v for r in view.rows for c, v in r.categories.items()},
        {r.model: r.win_rate for r in view.rows}, {r.model: r.cost for r in view.rows},
        macro_avgs={r.model: r.macro_avg for r in view.rows},
        category_intervals={(m, c): i for m, found in summaries.items() for c, i in found.categories.items()
                            if i is not None})


@requires(INFORMATICS)
def leaderboard(request: Request) -> Response:
    errors: dict[str, str] = {}
    style = _choice(request, "style", PROMPT_STYLES, DEFAULT_STYLE, errors)
    rule = WinRule(_choice(request, "rule", tuple(r.value for r in WinRule), WinRule.PAPER.value, errors))
    if errors:
        return _bad_parameters(request, errors, "Back to the leaderboard")
    console = console_of(request)
    view = data.leaderboard(console.home, prompt_style=style, rule=rule)
    summaries = summary_intervals(view, console.specs)
    figures = console_figures(view, summaries)
    rows = {r.model: r for r in view.rows}
    # Each model without a point, and why: a dropped point read as the rest being the whole Pareto comparison.
    not_plotted = {m: (f"cost unavailable: {cost_unknown_why(rows[m])}" if rows[m].cost is None
                       else "no score" if rows[m].macro_avg is None else "no win rate")
                   for m in figures.scatter_left_out}
    return console.render(request, "leaderboard.html", view=view, figures=figures, not_plotted=not_plotted,
                          styles=PROMPT_STYLES,
                          rules=WIN_RULES, rule_text=WIN_RULES[rule], summaries=summaries,
                          sd_undefined=SD_UNDEFINED, sd_note=SD_UNDEFINED_NOTE, win_left_out=WIN_RATE_LEFT_OUT,
                          unranked=UNRANKED)


def _reloading(request: Request, live: bool) -> dict[str, Any]:
    """A page that reloads itself while a run goes (a meta refresh) says so and can be told to stop (``?reload=off``):
    a reload moves a screen reader, and a keyboard's focus, back to the top of the page."""
    paused = request.query_params.get("reload") == "off"
    return {"refresh": LIVE_REFRESH_S if live and not paused else None, "reload_paused": live and paused}


@requires(INFORMATICS)
def runs(request: Request) -> Response:
    console = console_of(request)
    summaries = data.runs(console.home)
    live = any(s.badge not in FINAL_STATUSES for s in summaries)
    return console.render(request, "runs.html", runs=summaries, **_reloading(request, live))


@requires(INFORMATICS)
def run_detail(request: Request) -> Response:
    console = console_of(request)
    detail = data.run_detail(console.home, request.path_params["run_id"])
    live = detail.summary.badge not in FINAL_STATUSES
    return console.render(request, "run.html", detail=detail, run=detail.summary.run, **_reloading(request, live))


@requires(INFORMATICS)
def benchmarks(request: Request) -> Response:
    console = console_of(request)
    registered = data.registered_datasets(console.home)
    specs = sorted(console.specs.all(), key=lambda s: (s.category, s.id))
    return console.render(request, "benchmarks.html", specs=specs, registered=registered)


@requires(INFORMATICS)
def benchmark_detail(request: Request) -> Response:
    console = console_of(request)
    name = request.path_params["benchmark"]
    detail = data.benchmark_detail(console.home, name)
    return console.render(request, "benchmark.html", detail=detail, spec=console.specs.get(name))


@requires(INFORMATICS)
def instances(request: Request) -> Response:
    """Prompt, response, score and judge ratings of a run's items: patient-level, audited before it is shown."""
    console = console_of(request)
    run_id, benchmark = request.path_params["run_id"], request.path_params["benchmark"]
    back = "Back to the first page of these instances"
    try:
        page = max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        return _bad_parameters(request, {"page": "page: expected a number"}, back)
    failures = request.query_params.get("failures") == "1"
    try:
        console.specs.get(benchmark)
    except NotFoundError:
        raise NotFoundError(f"no benchmark {benchmark!r}") from None
    rows, total = data.instances(console.home, run_id, benchmark, page=min(page, MAX_PAGE), failures_only=failures)
    pages = max(1, -(-total // data.PAGE_SIZE))
    if page >= pages:  # nothing to show (nor to audit): say how many pages there are
        return _bad_parameters(request, {"page": f"page: there is no page {page + 1}; {total} item(s) fill "
                                                 f"{pages} page(s)"}, back)
    console.audit(identity_of(request), "console.view_instances", role="informatics", run_id=run_id,
                  benchmark=benchmark, page=page, failures_only=failures,
                  positions=[r.position for r in rows])  # never the ids: an id may be PHI (person and date)
    return console.render(request, "instances.html", rows=rows, total=total, page=page, pages=pages,
                          failures=failures, run_id=run_id, benchmark=benchmark, spec=console.specs.get(benchmark))


def routes() -> list[Route]:
    return [
        Route("/leaderboard", leaderboard), Route("/runs", runs), Route("/runs/{run_id}", run_detail),
        Route("/runs/{run_id}/{benchmark}/instances", instances), Route("/benchmarks", benchmarks),
        Route("/benchmarks/{benchmark}", benchmark_detail),
    ]
