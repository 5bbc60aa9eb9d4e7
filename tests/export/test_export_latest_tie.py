"""Two runs of a model created at the same instant (a resolution the clock can give, and a restored backup
can): the leaderboard and the export publish the same one, whatever order the store returns them in or
``--runs`` names them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from medhelm_local.analysis.aggregate import latest_runs
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.export.aggregates import RawCell, latest_cells
from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.store.store import RunInfo
from tests.analysis.test_leaderboard_cli import answers, pubmedqa
from tests.scoring.helpers import _write_run, register

SAME_INSTANT = datetime(2026, 11, 26, 4, 0, 0)


def _cell(run_id: str, score: float) -> RawCell:
    return RawCell(run_id=run_id, model="m", benchmark="pubmedqa", category="Cat A", metric="exact_match",
                   score=score, n_scored=10, n_failed=0, n_total=10, created_at=SAME_INSTANT)


def test_the_export_picks_the_same_cell_whatever_the_order_of_runs() -> None:
    a, b = _cell("run-aaa", 0.4), _cell("run-bbb", 0.9)
    assert [a, b][latest_cells([a, b])[("m", "pubmedqa")]].run_id == "run-bbb"
    assert [b, a][latest_cells([b, a])[("m", "pubmedqa")]].run_id == "run-bbb"  # was run-aaa: the later in the list


def test_the_leaderboard_picks_the_run_the_export_picks(tmp_path: Path) -> None:
    for order in (["run-aaa", "run-bbb"], ["run-bbb", "run-aaa"]):
        home = Home(tmp_path / "-".join(order))
        home.init()
        data = pubmedqa(10)
        with Store.open(home) as store:
            fingerprint = register(store, "pubmedqa", data)
            for run_id in order:
                run = RunInfo(run_id=run_id, model="m", benchmarks=["pubmedqa"], created_at=SAME_INSTANT,
                              finished_at=SAME_INSTANT, status="finished", max_instances=None, seed=0, manifest={})
                _write_run(store, run, {"pubmedqa": (fingerprint, data, answers(data, 5))})
            assert latest_runs(store, SHIPPED) == {("m", "pubmedqa"): "run-bbb"}, order
