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
        leaderboard = model_costs(store, home.config, latest_runs(store, SHIPPED))
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


def test_the_exported_cost_is_that_of_the_published_cells_only(tmp_path: Path) -> None:
    """Run 1 covers pubmedqa and medqa; run 2 re-runs medqa. The export publishes run 2's medqa cell (the latest), so
    run 1's medqa answers and their judging are not behind the model's published scores: summing every requested
    run priced medqa twice, beside a win rate that counts it once."""
    from medhelm_local.store.judgments import Judgment, JudgmentStatus, record_judgment
    from tests.analysis.test_leaderboard_cli import answers, medqa, pubmedqa
    from tests.scoring.helpers import _run_info, _write_run, add_run, register

    home = _priced_home(tmp_path / "home")
    p_data, m_data = pubmedqa(12), medqa(12)
    with Store.open(home) as store:
        p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", m_data)
        first = _write_run(store, _run_info("alpha", ["pubmedqa", "medqa"], "finished"),
                           {"pubmedqa": (p_fp, p_data, answers(p_data, 6)),
                            "medqa": (m_fp, m_data, answers(m_data, 6))},
                           prompt_tokens=100, completion_tokens=10)
        for inst in m_data:
            record_judgment(store, Judgment(run_id=first, benchmark="medqa", instance_id=inst.id, judge="judge",
                                            prompt_hash="h", status=JudgmentStatus.OK, ratings={"accuracy": 3},
                                            prompt_tokens=100, completion_tokens=10))
        second = add_run(store, "alpha", "medqa", m_fp, m_data, answers(m_data, 9), prompt_tokens=100,
                         completion_tokens=10)
        raw = collect(store, SHIPPED, home.config, [first, second])
        leaderboard = model_costs(store, home.config, latest_runs(store, SHIPPED))
    cost = {u.model: u for u in raw.usage}["alpha"].cost
    # 12 pubmedqa answers of run 1 + 12 medqa answers of run 2, each 100 x 1.0 + 10 x 2.0 per million; no judging
    # of a published cell
    assert cost == pytest.approx(24 * 120 / 1e6)  # was 36 x 120 + run 1's medqa judging
    assert cost == pytest.approx(leaderboard["alpha"].total)
