"""The exported cost of a model is the leaderboard's: its runs plus the jury's judging of them (MedHELM Table 3 /
Figure 5: benchmark runs and LLM-jury evaluation), each priced from measured tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.analysis.aggregate import latest_runs
from medhelm_local.analysis.cost_performance import model_costs
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.export.aggregates import collect
from medhelm_local.store import Store
from tests.analysis.test_cost_performance import _judged_alpha_and, _priced_home


def test_the_exported_cost_includes_the_jury(tmp_path: Path) -> None:
    home = _priced_home(tmp_path / "home")
    with Store.open(home) as store:
        _judged_alpha_and(store, "beta")
        alpha_runs = [run.run_id for run in store.list_runs() if run.model == "alpha"]
        raw = collect(store, SHIPPED, home.config, alpha_runs)
        leaderboard = model_costs(store, home.config, latest_runs(store))
    usage = {u.model: u for u in raw.usage}
    # runs: 10 x (100 x 1.0 + 10 x 2.0) / 1e6; jury: 10 x (100 x 0.5 + 10 x 1.0) / 1e6 (the judge's own prices)
    assert usage["alpha"].cost == pytest.approx((1200 + 600) / 1e6)  # was 1200 / 1e6: the jury left out
    assert usage["alpha"].cost == pytest.approx(leaderboard["alpha"].total)


def test_an_unpriced_judge_makes_the_exported_cost_unknown(tmp_path: Path) -> None:
    home = _priced_home(tmp_path / "home")
    config = home.config.model_copy(deep=True)
    config.models = [m for m in config.models if m.name != "judge"]
    with Store.open(home) as store:
        _judged_alpha_and(store, "beta")
        alpha_runs = [run.run_id for run in store.list_runs() if run.model == "alpha"]
        raw = collect(store, SHIPPED, config, alpha_runs)
    assert {u.model: u for u in raw.usage}["alpha"].cost is None  # never the runs' cost alone
