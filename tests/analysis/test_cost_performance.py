"""Cost-performance: measured tokens x configured pricing for the runs and the jury; unknown is never zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.analysis.aggregate import latest_runs
from medhelm_local.analysis.cost_performance import model_costs, pareto_front
from medhelm_local.home.config import ModelEndpoint, Pricing
from medhelm_local.records import Instance
from medhelm_local.store import Store
from medhelm_local.store.judgments import Judgment, JudgmentStatus, record_judgment
from tests.scoring.helpers import add_run, make_home, register

pytest.importorskip("medhelm_local.analysis.cost")


def test_model_costs_include_the_jury(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    config = home.config.model_copy(deep=True)
    config.models += [
        ModelEndpoint(name="alpha", base_urls=["http://127.0.0.1:9"],
                      pricing=Pricing(input_per_million=1.0, output_per_million=2.0)),
        ModelEndpoint(name="beta", base_urls=["http://127.0.0.1:9"]),
        ModelEndpoint(name="judge", base_urls=["http://127.0.0.1:9"], pricing=Pricing(input_per_million=0.5)),
    ]
    config.judges = ["judge"]
    home.save_config(config)
    data = [Instance(benchmark="medication_qa", id=f"m{i}", fields={"question": "q"}, references=["r"])
            for i in range(10)]
    with Store.open(home) as store:
        fingerprint = register(store, "medication_qa", data)
        alpha = add_run(store, "alpha", "medication_qa", fingerprint, data, {i.id: "a" for i in data},
                        prompt_tokens=100, completion_tokens=10)
        add_run(store, "beta", "medication_qa", fingerprint, data, {i.id: "a" for i in data},
                prompt_tokens=100, completion_tokens=10)
        for inst in data:
            record_judgment(store, Judgment(run_id=alpha, benchmark="medication_qa", instance_id=inst.id,
                                            judge="judge", prompt_hash="h", status=JudgmentStatus.OK,
                                            ratings={"accuracy": 3}, prompt_tokens=100, completion_tokens=10))
        costs = model_costs(store, home.config, latest_runs(store))
    # runs: (10 x 100 x 1.0 + 10 x 10 x 2.0) / 1e6; jury: 10 x 100 x 0.5 / 1e6
    assert costs["alpha"].benchmark_cost == pytest.approx(1200 / 1e6)
    assert costs["alpha"].jury_cost == pytest.approx(500 / 1e6)
    assert costs["alpha"].total == pytest.approx(1700 / 1e6)
    assert costs["beta"].total is None and "no pricing" in costs["beta"].note


def test_pareto_front() -> None:
    points = {"cheap-weak": (1.0, 0.3), "dear-strong": (5.0, 0.8), "dear-weak": (6.0, 0.4),
              "mid": (3.0, 0.6), "unknown": (None, 0.9)}
    assert pareto_front(points) == {"cheap-weak", "mid", "dear-strong"}
