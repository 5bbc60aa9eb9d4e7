"""Which run the leaderboard shows for a model and benchmark: a newer run that failed every request, was
interrupted or scored nothing never replaces a good result, and is never hidden either."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.export.aggregates import RawCell, latest_cells
from medhelm_local.home import Home
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.store import Store
from medhelm_local.store.runlock import run_lock
from tests.analysis.test_leaderboard_cli import answers, pubmedqa
from tests.conftest import Cli, cli_env
from tests.console.pages import page_as
from tests.scoring.helpers import add_run, make_home, register

N = 12


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, dict[str, str]]:
    """alpha: a good run (6 of 12 right), then one whose every request failed, then an interrupted one; beta: a
    good run (4 of 12), then a newer one with 3 failed requests (still a score: failures are counted apart);
    gamma: only a run whose every request failed."""
    home = make_home(tmp_path_factory.mktemp("newer") / "home")
    data = pubmedqa(N)
    every_failed = {i.id: None for i in data}
    ids: dict[str, str] = {}
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        for name, model, outputs, status in (
                ("alpha_good", "alpha", answers(data, 6), "finished"),
                ("beta_old", "beta", answers(data, 4), "finished"),
                ("alpha_failed", "alpha", every_failed, "finished"),
                ("alpha_interrupted", "alpha", answers(data, 12), "interrupted"),
                ("beta_new", "beta", answers(data, 5, failed=3), "finished"),
                ("gamma_failed", "gamma", every_failed, "finished")):
            ids[name] = add_run(store, model, "pubmedqa", fingerprint, data, outputs, status=status)
            score_benchmark(store, SHIPPED, ids[name], "pubmedqa")
    return home, ids


def test_a_failed_or_interrupted_rerun_does_not_replace_the_good_result(runs: tuple[Home, dict[str, str]]) -> None:
    """alpha's newest finished run failed every request: the leaderboard showed alpha with no score on pubmedqa,
    unranked, its good result gone. It now shows the good run's score and names both newer runs."""
    home, ids = runs
    cli = Cli(home=home.root, env=cli_env())
    result = cli("leaderboard", "--json", "--resamples", "0")
    assert result.code == 0, result.stderr
    rows = {r["model"]: r for r in result.json()}
    alpha = rows["alpha"]["benchmarks"]["pubmedqa"]
    assert alpha["score"] == pytest.approx(6 / 12) and alpha["n"] == 12 and alpha["n_failed"] == 0
    assert alpha["run_id"] == ids["alpha_good"]
    assert alpha["newer_runs_not_shown"] == [
        {"run_id": ids["alpha_interrupted"], "status": "interrupted", "live": None},
        {"run_id": ids["alpha_failed"], "status": "finished", "live": None}]
    assert rows["alpha"]["rank"] is not None and rows["alpha"]["unscored_benchmarks"] == []
    # a newer run with some failures is still the newest scored run: it is shown, its failures counted
    beta = rows["beta"]["benchmarks"]["pubmedqa"]
    assert beta["run_id"] == ids["beta_new"] and beta["n"] == 9 and beta["n_failed"] == 3
    assert beta["score"] == pytest.approx(5 / 9) and beta["newer_runs_not_shown"] == []
    # no run scored anything: the newest finished one is shown, with its failures, never an invented score
    gamma = rows["gamma"]["benchmarks"]["pubmedqa"]
    assert gamma["run_id"] == ids["gamma_failed"] and gamma["score"] is None and gamma["n_failed"] == 12

    said = (f"alpha on pubmedqa shows run {ids['alpha_good']}, not the newer {ids['alpha_interrupted']} "
            f"(interrupted, not finished); {ids['alpha_failed']} (finished, no instance scored: every request or "
            "judgement failed)")
    table = cli("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    assert said in table.stderr
    assert "(n=12) [a newer run not shown; other items than a rival's: see below]" in table.stdout
    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200
    assert said in page.text


def test_a_killed_newer_run_is_named_interrupted_as_runs_list_names_it(tmp_path: Path) -> None:
    """A newer run killed part-way (OOM, a node lost) keeps the stored status `running`. `runs list` showed it
    interrupted, with the command that resumes it, while the leaderboard and the console said "(running, not
    finished)", as if it were still being sent. Both now read its locks as `runs list` does."""
    home = make_home(tmp_path / "home")
    data = pubmedqa(N)
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        good = add_run(store, "alpha", "pubmedqa", fingerprint, data, answers(data, 6))
        score_benchmark(store, SHIPPED, good, "pubmedqa")
        killed = add_run(store, "alpha", "pubmedqa", fingerprint, data, answers(data, 3), status="running")
    with run_lock(home.store_path, killed):  # the lock every sending process takes, left when it was killed
        pass
    cli = Cli(home=home.root, env=cli_env())
    listed = cli("runs", "list")
    assert listed.code == 0 and "interrupted (no process is sending it" in listed.stdout
    result = cli("leaderboard", "--json", "--resamples", "0")
    assert result.code == 0, result.stderr
    shown = result.json()[0]["benchmarks"]["pubmedqa"]
    assert shown["run_id"] == good
    assert shown["newer_runs_not_shown"] == [{"run_id": killed, "status": "running", "live": False}]
    said = (f"alpha on pubmedqa shows run {good}, not the newer {killed} (interrupted: no process is sending it, "
            "not finished)")
    table = cli("leaderboard", "--resamples", "0")
    assert table.code == 0 and said in table.stderr
    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200 and said in page.text


def _cell(run_id: str, created_at: datetime, n_scored: int) -> RawCell:
    return RawCell(run_id=run_id, model="m", benchmark="pubmedqa", category="Cat A", metric="exact_match",
                   score=0.5 if n_scored else None, n_scored=n_scored, n_failed=10 - n_scored, n_total=10,
                   created_at=created_at)


def test_the_export_publishes_the_run_the_leaderboard_shows() -> None:
    """Of the runs requested, the export took the latest: one whose every request failed replaced the good score
    in the published averages and win rate. It takes the leaderboard's run now."""
    good = _cell("run-good", datetime(2026, 1, 1), 10)
    failed = _cell("run-failed", datetime(2026, 1, 2), 0)
    for cells in ([good, failed], [failed, good]):
        assert cells[latest_cells(cells)[("m", "pubmedqa")]].run_id == "run-good"
    older_failed = _cell("run-older", datetime(2025, 12, 1), 0)
    assert [older_failed, failed][latest_cells([older_failed, failed])[("m", "pubmedqa")]].run_id == "run-failed"

