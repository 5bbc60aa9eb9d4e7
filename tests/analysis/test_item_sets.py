"""Each model's score on a benchmark leaves out its own failed items (never scored 0): where two models compared
there scored different items, the leaderboard says so, per benchmark, with how many items each score leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest

from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.store import Store
from tests.analysis.test_leaderboard_cli import answers, medqa, pubmedqa
from tests.conftest import Cli, cli_env
from tests.console.pages import page_as
from tests.scoring.helpers import add_run, make_home, register

N = 40


def test_scores_over_different_items_are_named_per_benchmark(tmp_path: Path) -> None:
    """alpha's pubmedqa score left out 2 failed items, beta's none: the leaderboard compared 30/38 with 20/40 in
    the win rate and said nothing beyond each cell's counts. It now names the benchmark, and how many items each
    score leaves out, in the table, --json and the console; the numbers themselves are unchanged."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        p_data, m_data = pubmedqa(N), medqa(N)
        p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", m_data)
        for model, p_answers, m_answers in (("alpha", answers(p_data, 30, failed=2), answers(m_data, 20)),
                                            ("beta", answers(p_data, 20), answers(m_data, 30))):
            for benchmark, data, fingerprint, outputs in (("pubmedqa", p_data, p_fp, p_answers),
                                                          ("medqa", m_data, m_fp, m_answers)):
                run_id = add_run(store, model, benchmark, fingerprint, data, outputs)
                score_benchmark(store, SHIPPED, run_id, benchmark)
    cli = Cli(home=home.root, env=cli_env())
    result = cli("leaderboard", "--json", "--resamples", "0")
    assert result.code == 0, result.stderr
    rows = {r["model"]: r for r in result.json()}
    alpha, beta = rows["alpha"]["benchmarks"], rows["beta"]["benchmarks"]
    assert alpha["pubmedqa"]["scored_items_differ_from"] == {"beta": {"only_own": 0, "only_rival": 2}}
    assert beta["pubmedqa"]["scored_items_differ_from"] == {"alpha": {"only_own": 2, "only_rival": 0}}
    assert alpha["medqa"]["scored_items_differ_from"] == {} == beta["medqa"]["scored_items_differ_from"]
    # what the numbers mean is unchanged: each score over its own scored items, the win rate over those scores
    assert alpha["pubmedqa"]["score"] == pytest.approx(30 / 38) and alpha["pubmedqa"]["n"] == 38
    assert rows["alpha"]["win_rate"] == pytest.approx(1 / 2) and rows["beta"]["win_rate"] == pytest.approx(1 / 2)

    said = ("pubmedqa: the scores compared are over different items (a failed item is left out of its model's "
            "score, never scored 0): alpha's leaves out 2 of its 40, beta's leaves out 0 of its 40. Win rates and "
            "macro averages compare these scores as they are; the paired differences and MDE use only the items "
            "both models scored")
    table = cli("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    assert said in table.stderr
    assert "\nmedqa:" not in table.stderr
    assert "(n=38, 2 failed) [other items than a rival's: see below]" in table.stdout
    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200
    assert said in page.text.replace("&#39;", "'")


def test_the_win_rate_over_common_items_is_reported_beside_the_papers(tmp_path: Path) -> None:
    """alpha failed pubmedqa's items 20-29, which beta got wrong: over its own 30 items alpha scores 20/30, beta
    22/40, so alpha won the pairing only because its failures took items beta was scored on. Over the 30 items
    both scored beta wins (22/30 against 20/30). The win rate (the rank's) is unchanged; the common-items win
    rate beside it says so."""
    home = make_home(tmp_path / "home")
    p_data, m_data = pubmedqa(N), medqa(N)
    wrong = {i.id: ("no" if i.label != "no" else "yes") for i in p_data}
    alpha = {i.id: (i.label if n < 20 else None if n < 30 else wrong[i.id]) for n, i in enumerate(p_data)}
    beta = {i.id: (i.label if n < 20 or n in (30, 31) else wrong[i.id]) for n, i in enumerate(p_data)}
    with Store.open(home) as store:
        p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", m_data)
        for model, p_answers, m_answers in (("alpha", alpha, answers(m_data, 20)), ("beta", beta, answers(m_data, 30))):
            for benchmark, data, fingerprint, outputs in (("pubmedqa", p_data, p_fp, p_answers),
                                                          ("medqa", m_data, m_fp, m_answers)):
                run_id = add_run(store, model, benchmark, fingerprint, data, outputs)
                score_benchmark(store, SHIPPED, run_id, benchmark)
    cli = Cli(home=home.root, env=cli_env())
    rows = {r["model"]: r for r in cli("leaderboard", "--json", "--resamples", "0").json()}
    assert rows["alpha"]["benchmarks"]["pubmedqa"]["score"] == pytest.approx(20 / 30)
    assert rows["beta"]["benchmarks"]["pubmedqa"]["score"] == pytest.approx(22 / 40)
    assert rows["alpha"]["win_rate"] == pytest.approx(1 / 2) and rows["beta"]["win_rate"] == pytest.approx(1 / 2)
    assert rows["alpha"]["win_rate_common_items"] == 0.0 and rows["beta"]["win_rate_common_items"] == 1.0
    assert rows["alpha"]["benchmarks"]["pubmedqa"]["scored_items_differ_from"] == {
        "beta": {"only_own": 0, "only_rival": 10}}
    table = cli("leaderboard", "--resamples", "0")
    assert ("Win rate with each pairing decided over the items both models scored (win_rate_common_items): "
            "beta 1.000, alpha 0.000; the rank uses the win rate over each model's own scored items") in table.stderr
    assert "beta's leaves out 0 of its 40, alpha's leaves out 10 of its 40" in table.stderr
