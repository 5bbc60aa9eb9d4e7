"""The leaderboard as the CLI, the console and the demo show it, assembled in one place (:func:`load_board`): what
it needs is read from the store in one short read (:func:`read_board`, a reader never holds the store while the
bootstrap runs), then computed (:func:`build_board`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial

from medhelm_local.analysis.aggregate import (
    InstanceSeries,
    ShownRuns,
    finished_runs_by_style,
    scores_of,
    series_of,
    shown_runs,
)
from medhelm_local.analysis.comparability import Comparability, apply_comparability, compare_runs
from medhelm_local.analysis.cost_performance import ModelCost, model_costs
from medhelm_local.analysis.leaderboard import (
    BenchmarkMDE,
    ModelRow,
    PairwiseDifference,
    WinRule,
    apply_costs,
    benchmark_mdes,
    build_leaderboard,
    common_items_win_rate,
    item_set_differences,
    pairwise_differences,
)
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.home import Home
from medhelm_local.home.config import ApplianceConfig
from medhelm_local.records import BenchmarkScore
from medhelm_local.store.store import Store


@dataclass
class BoardData:
    """What the leaderboard reads from the store: the runs it shows of one prompt style (of one category)."""

    runs: ShownRuns
    results: list[BenchmarkScore]
    series: list[InstanceSeries]
    costs: dict[str, ModelCost]
    comparability: Comparability
    prompt_hashes: dict[tuple[str, str], str]  # (model, benchmark) -> the prompt-style hash its run recorded
    other_styles: dict[str, int]  # finished runs of the prompt styles not shown


@dataclass
class Board:
    rows: list[ModelRow]
    series: list[InstanceSeries]  # per-instance values behind the rows
    pairwise: list[PairwiseDifference]
    mdes: dict[str, BenchmarkMDE]
    other_styles: dict[str, int]


def _prompt_hashes(store: Store, chosen: dict[tuple[str, str], str]) -> dict[tuple[str, str], str]:
    """(model, benchmark) -> the prompt-style hash its run recorded (runs from before styles: none)."""
    manifests = {run_id: (store.get_run(run_id) or None) for run_id in set(chosen.values())}
    out = {}
    for key, run_id in chosen.items():
        run = manifests[run_id]
        recorded = ((run.manifest if run else {}).get("prompt_style") or {}).get("sha256") or {}
        if key[1] in recorded:
            out[key] = str(recorded[key[1]])
    return out


def read_board(store: Store, specs: SpecRegistry, config: ApplianceConfig, *, prompt_style: str,
               category: str | None = None, home: Home | None = None) -> BoardData:
    """The leaderboard's inputs; with ``category``, the cost and comparability of the runs behind that category's
    scores only; with ``home``, whether a newer ``running`` run is still sent (its locks), as `runs list` says."""
    live = None
    if home is not None:
        from medhelm_local.runner.liveness import run_live

        live = partial(run_live, home, store)
    runs = shown_runs(store, specs, prompt_style, live=live)
    chosen = runs.chosen
    behind = {key: run_id for key, run_id in chosen.items()
              if category is None or specs.category_of(key[1]) == category}
    series = series_of(store, specs, chosen)
    if category is not None:
        series = [s for s in series if specs.category_of(s.benchmark) == category]
    return BoardData(runs=runs, results=scores_of(store, specs, chosen), series=series,
                     costs=model_costs(store, config, behind), comparability=compare_runs(store, behind),
                     prompt_hashes=_prompt_hashes(store, chosen),
                     other_styles={s: n for s, n in finished_runs_by_style(store).items() if s != prompt_style})


def build_board(data: BoardData, specs: SpecRegistry, *, prompt_style: str, rule: WinRule,
                category: str | None = None, resamples: int, seed: int) -> Board:
    """Rows (win rate, CIs, costs, Pareto place, comparability), paired differences and MDEs; a pairing of runs that
    are not comparable counts in none of the pairwise figures."""
    unlike = data.comparability.unlike
    rows = build_leaderboard(data.results, specs=specs, series=data.series, rule=rule, category=category,
                             resamples=resamples, seed=seed, unlike=unlike)
    for row in rows:
        row.prompt_style = prompt_style
        row.prompt_sha256 = {b: h for (m, b), h in data.prompt_hashes.items() if m == row.model and b in row.benchmarks}
        row.run_ids = {b: data.runs.chosen[(row.model, b)] for b in sorted(row.benchmarks)}
        row.newer_runs = {b: newer for b in sorted(row.benchmarks) if (newer := data.runs.newer.get((row.model, b)))}
    differ = item_set_differences(data.series, unlike=unlike)
    for row in rows:
        row.items_differ = {b: differ[(row.model, b)] for b in sorted(row.benchmarks) if (row.model, b) in differ}
        if row.win_rate is not None:
            row.win_rate_common_items = common_items_win_rate(data.series, row.model, rule, unlike=unlike)
    apply_costs(rows, data.costs)
    apply_comparability(rows, data.comparability)
    return Board(rows=rows, series=data.series,
                 pairwise=pairwise_differences(data.series, resamples=resamples, seed=seed, unlike=unlike),
                 mdes=benchmark_mdes(data.series, unlike=unlike), other_styles=data.other_styles)


def load_board(store: AbstractContextManager[Store], specs: SpecRegistry, config: ApplianceConfig, *,
               prompt_style: str, rule: WinRule, category: str | None = None, resamples: int,
               seed: int, home: Home | None = None) -> Board:
    """The leaderboard over ``store`` (opened by the caller as it opens stores, closed here once read), as every
    view of it shows it: the `leaderboard` command, the console and the demo. ``home``: the store's, where the
    caller sends no run (its lock probes would release this process's own locks: never the demo's)."""
    with store as opened:
        data = read_board(opened, specs, config, prompt_style=prompt_style, category=category, home=home)
    return build_board(data, specs, prompt_style=prompt_style, rule=rule, category=category, resamples=resamples,
                       seed=seed)
