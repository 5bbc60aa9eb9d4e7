"""Cost-performance: measured tokens x configured pricing for the runs and the jury; unknown is never zero, and
an error is an error, not an unknown cost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from medhelm_local.analysis import cost
from medhelm_local.analysis.aggregate import latest_runs
from medhelm_local.analysis.cost import price
from medhelm_local.analysis.cost_performance import model_costs, pareto_front
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.errors import NotFoundError
from medhelm_local.home import Home
from medhelm_local.home.config import ModelEndpoint, Pricing
from medhelm_local.records import Instance
from medhelm_local.store import Store
from medhelm_local.store.judgments import Judgment, JudgmentStatus, record_judgment
from tests.scoring.helpers import add_run, make_home, register

DATA = [Instance(benchmark="medication_qa", id=f"m{i}", fields={"question": "q"}, references=["r"])
        for i in range(10)]


def _priced_home(root: Path) -> Home:
    """A home with a priced model ``alpha``, an unpriced ``beta`` and a priced judge."""
    home = make_home(root)
    config = home.config.model_copy(deep=True)
    config.models += [
        ModelEndpoint(name="alpha", base_urls=["http://127.0.0.1:9"],
                      pricing=Pricing(input_per_million=1.0, output_per_million=2.0)),
        ModelEndpoint(name="beta", base_urls=["http://127.0.0.1:9"]),
        ModelEndpoint(name="judge", base_urls=["http://127.0.0.1:9"],
                      pricing=Pricing(input_per_million=0.5, output_per_million=1.0)),
    ]
    config.judges = ["judge"]
    home.save_config(config)
    return home


def _judge_all(store: Store, run_id: str) -> None:
    for inst in DATA:
        record_judgment(store, Judgment(run_id=run_id, benchmark="medication_qa", instance_id=inst.id,
                                        judge="judge", prompt_hash="h", status=JudgmentStatus.OK,
                                        ratings={"accuracy": 3}, prompt_tokens=100, completion_tokens=10))


def _judged_alpha_and(store: Store, other: str) -> None:
    """Runs of ``alpha`` (judged by the jury) and ``other`` on the same items, with the same measured tokens."""
    fingerprint = register(store, "medication_qa", DATA)
    alpha = add_run(store, "alpha", "medication_qa", fingerprint, DATA, {i.id: "a" for i in DATA},
                    prompt_tokens=100, completion_tokens=10)
    add_run(store, other, "medication_qa", fingerprint, DATA, {i.id: "a" for i in DATA},
            prompt_tokens=100, completion_tokens=10)
    _judge_all(store, alpha)


def test_model_costs_include_the_jury(tmp_path: Path) -> None:
    home = _priced_home(tmp_path / "home")
    with Store.open(home) as store:
        _judged_alpha_and(store, "beta")
        costs = model_costs(store, home.config, latest_runs(store, SHIPPED))
    # runs: (10 x 100 x 1.0 + 10 x 10 x 2.0) / 1e6; jury: (10 x 100 x 0.5 + 10 x 10 x 1.0) / 1e6
    assert costs["alpha"].benchmark_cost == pytest.approx(1200 / 1e6)
    assert costs["alpha"].jury_cost == pytest.approx(600 / 1e6)
    assert costs["alpha"].total == pytest.approx(1800 / 1e6)
    assert costs["beta"].total is None and "no pricing" in costs["beta"].note


def test_a_token_side_without_a_price_is_unknown_not_free() -> None:
    """Only an input price configured: the completion tokens' cost is unknown, so the total is too (it was the
    input cost alone, as if output were free)."""
    method, total, _, note = price(Pricing(input_per_million=2.0), prompt_tokens=1_000, completion_tokens=50,
                                   wall_s=1, tokens_complete=True)
    assert (method, total) == ("tokens", None) and "output_per_million" in note
    method, total, _, note = price(Pricing(output_per_million=3.0), prompt_tokens=1_000, completion_tokens=50,
                                   wall_s=1, tokens_complete=True)
    assert (method, total) == ("tokens", None) and "input_per_million" in note
    # no tokens on the unpriced side: nothing to price there, the total is exact (1,000 x 2.0 / 1e6)
    assert price(Pricing(input_per_million=2.0), prompt_tokens=1_000, completion_tokens=0, wall_s=1,
                 tokens_complete=True)[1] == pytest.approx(0.002)
    # an explicit price of zero is a price: output free by configuration
    assert price(Pricing(input_per_million=2.0, output_per_million=0.0), prompt_tokens=1_000, completion_tokens=50,
                 wall_s=1, tokens_complete=True)[1] == pytest.approx(0.002)


def test_a_judge_priced_for_input_only_makes_the_jury_cost_unknown(tmp_path: Path) -> None:
    home = _priced_home(tmp_path / "home")
    config = home.config.model_copy(deep=True)
    config.models = [m if m.name != "judge" else m.model_copy(update={"pricing": Pricing(input_per_million=0.5)})
                     for m in config.models]
    with Store.open(home) as store:
        _judged_alpha_and(store, "beta")
        costs = model_costs(store, config, latest_runs(store, SHIPPED))
    assert costs["alpha"].benchmark_cost == pytest.approx(1200 / 1e6)
    assert costs["alpha"].jury_cost is None and costs["alpha"].total is None
    assert "judge judge: pricing has no output_per_million" in costs["alpha"].note


def test_pareto_front() -> None:
    points = {"cheap-weak": (1.0, 0.3), "dear-strong": (5.0, 0.8), "dear-weak": (6.0, 0.4),
              "mid": (3.0, 0.6), "unknown": (None, 0.9)}
    assert pareto_front(points) == {"cheap-weak", "mid", "dear-strong"}


def test_a_model_or_judge_removed_from_the_config_has_an_unknown_cost(tmp_path: Path) -> None:
    home = _priced_home(tmp_path / "home")
    with Store.open(home) as store:
        _judged_alpha_and(store, "gone")
        costs = model_costs(store, home.config, latest_runs(store, SHIPPED))
        assert costs["gone"].benchmark_cost is None and costs["gone"].total is None
        assert costs["gone"].note == "model no longer configured"
        assert costs["alpha"].total == pytest.approx(1800 / 1e6)  # the others are still priced
        config = home.config.model_copy(deep=True)
        config.models = [m for m in config.models if m.name != "judge"]
        costs = model_costs(store, config, latest_runs(store, SHIPPED))
    assert costs["alpha"].benchmark_cost == pytest.approx(1200 / 1e6)
    assert costs["alpha"].jury_cost is None and costs["alpha"].total is None
    assert "judge judge is no longer configured" in costs["alpha"].note


def test_a_missing_run_is_an_error_not_an_unconfigured_model(tmp_path: Path) -> None:
    home = _priced_home(tmp_path / "home")
    with Store.open(home) as store, pytest.raises(NotFoundError, match="run 'run-nowhere' not found"):
        model_costs(store, home.config, {("alpha", "medication_qa"): "run-nowhere"})


def test_a_bug_in_cost_accounting_surfaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A programming error inside the cost stage is raised, never turned into an unknown cost with a note."""
    home = _priced_home(tmp_path / "home")

    def broken_price(*args: object, **kwargs: object) -> None:
        raise TypeError("a bug in pricing")

    monkeypatch.setattr(cost, "price", broken_price)
    with Store.open(home) as store:
        fingerprint = register(store, "medication_qa", DATA)
        add_run(store, "alpha", "medication_qa", fingerprint, DATA, {i.id: "a" for i in DATA},
                prompt_tokens=100, completion_tokens=10)
        with pytest.raises(TypeError, match="a bug in pricing"):
            model_costs(store, home.config, latest_runs(store, SHIPPED))


def test_a_broken_cost_module_fails_the_import() -> None:
    """No fallback that reports "cost accounting is not available in this build": the cost stage is part of
    every build, so failing to import it is an error at import time."""
    code = ("import sys; sys.modules['medhelm_local.analysis.cost'] = None; "
            "import medhelm_local.analysis.cost_performance")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "ModuleNotFoundError" in done.stderr and "medhelm_local.analysis.cost" in done.stderr


def test_a_run_partly_replaced_by_a_later_run_counts_only_for_the_benchmarks_it_still_scores(tmp_path: Path) -> None:
    """Run 1 covers pubmedqa and medqa; run 2 re-runs medqa. The row's medqa score comes from run 2, so run 1's
    medqa answers and their judging are not behind the row: counting them priced medqa twice."""
    from tests.analysis.test_leaderboard_cli import answers, medqa, pubmedqa
    from tests.scoring.helpers import _run_info, _write_run

    home = _priced_home(tmp_path / "home")
    config = home.config.model_copy(deep=True)
    config.models.append(ModelEndpoint(name="gpu", base_urls=["http://127.0.0.1:9"],
                                       pricing=Pricing(gpu_hour_rate=3600.0)))
    home.save_config(config)
    p_data, m_data = pubmedqa(12), medqa(12)
    with Store.open(home) as store:
        p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", m_data)
        for model in ("alpha", "gpu"):
            first = _write_run(store, _run_info(model, ["pubmedqa", "medqa"], "finished"),
                               {"pubmedqa": (p_fp, p_data, answers(p_data, 6)),
                                "medqa": (m_fp, m_data, answers(m_data, 6))},
                               prompt_tokens=100, completion_tokens=10)
            for inst in m_data:  # the jury judged run 1's medqa answers: replaced, so not behind the row either
                record_judgment(store, Judgment(run_id=first, benchmark="medqa", instance_id=inst.id, judge="judge",
                                                prompt_hash="h", status=JudgmentStatus.OK, ratings={"accuracy": 3},
                                                prompt_tokens=100, completion_tokens=10))
            add_run(store, model, "medqa", m_fp, m_data, answers(m_data, 9), prompt_tokens=100,
                    completion_tokens=10)
        chosen = latest_runs(store, SHIPPED)
        assert chosen[("gpu", "pubmedqa")] == first and chosen[("gpu", "medqa")] != first
        costs = model_costs(store, home.config, chosen)
    # 12 pubmedqa answers of run 1 + 12 medqa answers of run 2, each 100 x 1.0 + 10 x 2.0 per million
    assert costs["alpha"].benchmark_cost == pytest.approx(24 * 120 / 1e6)  # was 36 x 120: run 1's medqa too
    assert costs["alpha"].jury_cost == 0.0  # was 12 x (100 x 0.5 + 10 x 1.0) / 1e6 for replaced answers
    assert costs["alpha"].total == pytest.approx(24 * 120 / 1e6)
    # GPU time is measured per run: run 1's share of it for pubmedqa alone is not known, so neither is the total
    assert costs["gpu"].benchmark_cost is None and costs["gpu"].total is None
    assert "GPU time cannot be split by benchmark" in costs["gpu"].note
