"""``leaderboard --json`` over models in a real (encrypted) store: scores, CIs, n, win-rate, MDE, pairwise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from medhelm_local.analysis.aggregate import latest_scores
from medhelm_local.analysis.leaderboard import build_leaderboard
from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.commands.leaderboard import leaderboard_payload
from medhelm_local.home import Home
from medhelm_local.records import Instance
from medhelm_local.scoring.engine import score_benchmark
from medhelm_local.store import Store
from tests.conftest import Cli, cli_env
from tests.console.pages import page_as
from tests.scoring.helpers import add_run, make_home, register

N = 40


def pubmedqa(n: int = N) -> list[Instance]:
    labels = ["yes", "no", "maybe"]
    return [Instance(benchmark="pubmedqa", id=f"p{i:03d}", fields={"context": f"c{i}", "question": f"q{i}?"},
                     references=[labels[i % 3]], label=labels[i % 3]) for i in range(n)]


def medqa(n: int = N) -> list[Instance]:
    return [Instance(benchmark="medqa", id=f"m{i:03d}", fields={"question": f"q{i}", "options": "A. x\nB. y"},
                     references=["A"], label="A", meta={"options": {"A": "x", "B": "y"}}) for i in range(n)]


def answers(data: list[Instance], right: int, failed: int = 0) -> dict[str, str | None]:
    """The first ``right`` instances answered correctly, the next ``failed`` requests failed, the rest wrong."""
    out: dict[str, str | None] = {}
    for i, inst in enumerate(data):
        if i < right:
            out[inst.id] = inst.label
        elif i < right + failed:
            out[inst.id] = None
        else:
            out[inst.id] = "no" if inst.label != "no" else "yes"
            if inst.benchmark == "medqa":
                out[inst.id] = "B"
    return out


@pytest.fixture(scope="module")
def store_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    home = make_home(tmp_path_factory.mktemp("leaderboard") / "home")
    with Store.open(home) as store:
        p_data, m_data = pubmedqa(), medqa()
        p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", m_data)
        plan = {"alpha": ((30, 2), (20, 0)), "beta": ((20, 0), (30, 0)), "gamma": ((10, 0), (10, 0))}
        for model, ((p_right, p_failed), (m_right, m_failed)) in plan.items():
            for benchmark, data, fingerprint, right, failed in (
                    ("pubmedqa", p_data, p_fp, p_right, p_failed), ("medqa", m_data, m_fp, m_right, m_failed)):
                run_id = add_run(store, model, benchmark, fingerprint, data, answers(data, right, failed))
                score_benchmark(store, SHIPPED, run_id, benchmark)
        # an unfinished later run does not replace the finished one
        run_id = add_run(store, "alpha", "pubmedqa", p_fp, p_data, answers(p_data, 0), status="running")
        score_benchmark(store, SHIPPED, run_id, "pubmedqa")
    return home


def test_leaderboard_json(store_home: Home) -> None:
    cli = Cli(home=store_home.root, env=cli_env())
    result = cli("leaderboard", "--json", "--resamples", "200")
    assert result.code == 0, result.stderr
    rows = result.json()
    assert isinstance(rows, list)
    by_model = {r["model"]: r for r in rows}
    alpha = by_model["alpha"]
    # pubmedqa: 30 right of 38 scored (2 failed, excluded, not zeros); medqa: 20/40
    assert alpha["benchmarks"]["pubmedqa"]["score"] == pytest.approx(30 / 38)
    assert alpha["benchmarks"]["pubmedqa"]["n"] == 38 and alpha["benchmarks"]["pubmedqa"]["n_failed"] == 2
    bench = alpha["benchmarks"]["pubmedqa"]
    assert bench["ci_low"] < bench["score"] < bench["ci_high"]
    assert bench["mde"] > 0
    assert bench["strict_format_rate"] == 1.0 and bench["parse_rate"] == 1.0
    # win-rate (paper rule): alpha beats beta and gamma on pubmedqa, loses to beta and beats gamma on medqa
    assert alpha["win_rate"] == pytest.approx(3 / 4)
    assert by_model["beta"]["win_rate"] == pytest.approx(3 / 4)
    assert by_model["gamma"]["win_rate"] == 0.0
    assert alpha["win_sd"] == pytest.approx(0.25)
    assert alpha["macro_avg"] == pytest.approx((30 / 38 + 0.5) / 2)
    assert alpha["sd"] == pytest.approx(abs(30 / 38 - 0.5) / 2)
    assert set(alpha["categories"]) == {"Clinical Decision Support", "Medical Research Assistance"}
    assert alpha["categories"]["Clinical Decision Support"] == pytest.approx(0.5)
    assert alpha["win_rule"] == "paper"
    assert alpha["cost"] is None  # no pricing configured: unavailable, never invented
    pair = alpha["pairwise"]["gamma"]["medqa"]
    assert pair["difference"] == pytest.approx(0.25) and pair["n"] == N
    assert pair["ci_low"] > 0  # 20/40 vs 10/40 on the same instances: a clear paired difference
    assert alpha["pairwise"]["beta"]["pubmedqa"]["n"] == 38

    helm = cli("leaderboard", "--json", "--resamples", "0", "--win-rule", "helm").json()
    assert isinstance(helm, list)
    assert {r["model"]: r["win_rate"] for r in helm}["alpha"] == pytest.approx(3 / 4)
    assert helm[0]["benchmarks"]["medqa"]["ci_low"] is None  # no resamples, no CI


def test_leaderboard_category_filter(store_home: Home) -> None:
    cli = Cli(home=store_home.root, env=cli_env())
    rows = cli("leaderboard", "--json", "--category", "medical research assistance", "--resamples", "50").json()
    assert isinstance(rows, list)
    assert all(set(r["benchmarks"]) == {"pubmedqa"} for r in rows)
    assert {r["model"]: r["win_rate"] for r in rows}["alpha"] == 1.0
    bad = cli("leaderboard", "--category", "Astrology")
    assert bad.code == 2 and "unknown category" in bad.stderr


def test_leaderboard_plain_output_and_shared_names(store_home: Home) -> None:
    cli = Cli(home=store_home.root, env=cli_env())
    result = cli("leaderboard", "--resamples", "50")
    assert result.code == 0, result.stderr
    assert "win rule: paper" in result.stdout and "minimum detectable effect" in result.stdout
    # the names the demo and the export use keep working without the store-level statistics
    with Store.open(store_home) as store:
        rows = build_leaderboard(latest_scores(store, SHIPPED), specs=SHIPPED)
    payload = leaderboard_payload(rows)
    assert {r["model"] for r in payload} == {"alpha", "beta", "gamma"}
    assert all({"win_rate", "win_sd", "macro_avg", "sd", "categories", "benchmarks"} <= set(r) for r in payload)


def test_an_empty_leaderboard_names_the_style_and_rule_asked_for(home_cli: Cli) -> None:
    # no run of that style yet: the title must not claim the default style (or rule) it was not asked for
    result = home_cli("leaderboard", "--prompt-style", "medhelm", "--win-rule", "helm")
    assert result.code == 0, result.stderr
    assert "# leaderboard (prompt style: medhelm; win rule: helm)" in result.stdout


def test_the_plain_leaderboard_counts_the_failed_instances_beside_each_score(store_home: Home) -> None:
    """The table says how many instances failed beside a score, as `--json` and the console do (alpha's pubmedqa:
    38 scored, 2 failed); a cell whose every instance failed reads as failed, not as a benchmark never run."""
    from medhelm_local.analysis.leaderboard import ModelRow
    from medhelm_local.commands.leaderboard import _cell
    from medhelm_local.records import BenchmarkScore

    result = Cli(home=store_home.root, env=cli_env())("leaderboard", "--resamples", "0")
    assert result.code == 0, result.stderr
    alpha = next(line for line in result.stdout.splitlines() if line.startswith("alpha\t"))  # the first table
    assert "0.789 (n=38, 2 failed)" in alpha and "0.500 (n=40)" in alpha  # medqa: none failed, none said
    failed = BenchmarkScore(model="m", benchmark="pubmedqa", metric="exact_match", score=None, n=0, n_failed=20)
    row = ModelRow(model="m", win_rate=None, macro_avg=None, benchmarks={"pubmedqa": failed})
    assert _cell(row, "pubmedqa") == "- (n=0, 20 failed)"
    assert _cell(row, "medqa") == "-"  # not run


def test_a_model_whose_every_request_failed_on_a_benchmark_is_flagged_not_ranked_silently(tmp_path: Path) -> None:
    """alpha answered pubmedqa perfectly and failed every medqa request; beta answered both half right. alpha's win
    rate leaves medqa out (a failure is never scored 0), so it ranked first with a win rate of 1.0 and nothing said
    that it had no medqa score. The JSON, the table and the console now name the unscored benchmark."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        p_data, m_data = pubmedqa(12), medqa(12)
        p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", m_data)
        for model, benchmark, data, fingerprint, outputs in (
                ("alpha", "pubmedqa", p_data, p_fp, answers(p_data, 12)),
                ("alpha", "medqa", m_data, m_fp, answers(m_data, 0, failed=12)),
                ("beta", "pubmedqa", p_data, p_fp, answers(p_data, 6)),
                ("beta", "medqa", m_data, m_fp, answers(m_data, 6))):
            score_benchmark(store, SHIPPED, add_run(store, model, benchmark, fingerprint, data, outputs), benchmark)
    cli = Cli(home=home.root, env=cli_env())
    rows = {r["model"]: r for r in cli("leaderboard", "--json", "--resamples", "0").json()}
    assert rows["alpha"]["win_rate"] == 1.0  # the paper's rule, over the benchmarks it has a score on
    assert rows["alpha"]["unscored_benchmarks"] == ["medqa"] and rows["beta"]["unscored_benchmarks"] == []
    table = cli("leaderboard", "--resamples", "0")
    assert "alpha: no scored instance on medqa (every request or judgement failed)" in table.stdout + table.stderr
    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200
    assert "alpha: no scored instance on medqa (every request or judgement failed)" in page.text
    assert "n=0 (12 failed)" in page.text


def test_models_scored_on_different_versions_of_a_dataset_are_named_and_never_paired(tmp_path: Path) -> None:
    """alpha ran pubmedqa, then the extract was corrected (every label changed) and registered again, and beta ran
    it. The same ids are other gold answers now: the leaderboard said nothing and showed a paired difference over
    "40 common instances". It now names the model scored on the other version, marks each cell, pairs neither."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        first = pubmedqa()
        first_fp = register(store, "pubmedqa", first)
        corrected = [i.model_copy(update={"label": "no" if i.label != "no" else "yes",
                                          "references": ["no" if i.label != "no" else "yes"]}) for i in first]
        corrected_fp = store.register_dataset("pubmedqa", "corrected-extract-sha256", "test-loader", "test",
                                              corrected, {}).fingerprint
        assert corrected_fp != first_fp
        for model, data, fingerprint in (("alpha", first, first_fp), ("beta", corrected, corrected_fp)):
            run_id = add_run(store, model, "pubmedqa", fingerprint, data, answers(data, 20))
            score_benchmark(store, SHIPPED, run_id, "pubmedqa")
    cli = Cli(home=home.root, env=cli_env())
    rows = {r["model"]: r for r in cli("leaderboard", "--json", "--resamples", "0").json()}
    assert rows["alpha"]["benchmarks"]["pubmedqa"]["dataset_current"] is False
    assert rows["beta"]["benchmarks"]["pubmedqa"]["dataset_current"] is True
    assert rows["alpha"]["pairwise"] == {} and rows["beta"]["pairwise"] == {}
    # their one pairing is no win and no loss: neither has a win rate (n/a, and why), not 1.0 and 0.0
    assert rows["alpha"]["win_rate"] is None and rows["beta"]["win_rate"] is None
    assert (rows["alpha"]["win_pairs"], rows["alpha"]["win_pairs_left_out"]) == (0, 1)
    assert "mde" not in rows["alpha"]["benchmarks"]["pubmedqa"]
    table = cli("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    assert "paired differences" not in table.stdout
    assert "minimum detectable effect" not in table.stdout
    alpha = next(line for line in table.stdout.splitlines() if line.startswith("alpha\t")).split("\t")
    assert alpha[1:3] == ["unranked", "n/a"]  # rank, win rate
    assert ("alpha: unranked, no win rate: its only (benchmark, rival) pairing is left out, their runs not "
            "comparable" in table.stderr)
    assert "alpha: win rate n/a" not in table.stderr  # said once, as the reason it is unranked
    assert ("alpha on pubmedqa scored another version of its dataset than the one registered last: run it again "
            "(`medhelm-local run --model alpha --benchmarks pubmedqa`)") in table.stderr
    assert "beta on pubmedqa scored another version" not in table.stderr
    assert "alpha on pubmedqa is not comparable with beta: dataset version" in table.stderr
    assert "[another dataset version; not comparable: see below]" in table.stdout
    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200
    assert _console_win_rates(page.text) == {"alpha": "n/a", "beta": "n/a"}
    assert "beta: unranked, no win rate: its only (benchmark, rival) pairing is left out" in page.text


def _console_win_rates(text: str) -> dict[str, str]:
    """Model -> the win rate cell of the console's leaderboard table, as shown."""
    cells = re.findall(r'<td class="model">([^<]+)</td><td class="num">(.*?)</td>', text)
    return {model: re.sub(r"<[^>]+>", "", cell) for model, cell in cells}


def _scored_run(store: Store, model: str, benchmark: str, fingerprint: str, data: list[Instance], right: int) -> None:
    """A finished run of ``model`` on ``benchmark``, its first ``right`` instances answered right, scored."""
    score_benchmark(store, SHIPPED, add_run(store, model, benchmark, fingerprint, data, answers(data, right)),
                    benchmark)


def _alpha_beta_gamma_on_pubmedqa(store: Store) -> str:
    """pubmedqa and medqa registered, alpha, beta and gamma scored on pubmedqa (30, 20, 10 of 40 right); returns
    medqa's fingerprint."""
    p_data = pubmedqa()
    p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", medqa())
    for model, right in (("alpha", 30), ("beta", 20), ("gamma", 10)):
        _scored_run(store, model, "pubmedqa", p_fp, p_data, right)
    return m_fp


def test_a_pairing_of_runs_on_two_dataset_versions_counts_in_no_win_rate(tmp_path: Path) -> None:
    """alpha ran medqa, then the extract lost a row and was registered again, and beta and gamma ran it. The
    leaderboard said the pairings were not comparable, yet counted them: alpha's two losses on medqa made its win
    rate 0.5, gamma's win over alpha there gave it 0.25. They now count for no one, in the table, `--json` and the
    console alike, and each row says how many pairings its win rate leaves out."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        m_fp = _alpha_beta_gamma_on_pubmedqa(store)
        m_data = medqa()
        _scored_run(store, "alpha", "medqa", m_fp, m_data, 10)
        shorter = m_data[:-1]
        again = store.register_dataset("medqa", "extract-again-sha256", "test-loader", "test", shorter, {})
        for model, right in (("beta", 30), ("gamma", 20)):
            _scored_run(store, model, "medqa", again.fingerprint, shorter, right)
    cli = Cli(home=home.root, env=cli_env())
    rows = {r["model"]: r for r in cli("leaderboard", "--json", "--resamples", "0").json()}
    # alpha: beats beta and gamma on pubmedqa, medqa left out; beta: loses to alpha, beats gamma on pubmedqa, beats
    # gamma on medqa; gamma: loses everything it can be compared on
    assert {m: r["win_rate"] for m, r in rows.items()} == {"alpha": 1.0, "beta": pytest.approx(2 / 3), "gamma": 0.0}
    assert {m: (r["win_pairs"], r["win_pairs_left_out"]) for m, r in rows.items()} == {
        "alpha": (2, 2), "beta": (3, 1), "gamma": (3, 1)}
    assert rows["alpha"]["win_sd"] is None  # one benchmark with a comparable rival
    assert rows["beta"]["win_sd"] == pytest.approx(0.25) and rows["gamma"]["win_sd"] == 0.0
    assert rows["alpha"]["macro_avg"] == pytest.approx((0.75 + 0.25) / 2)  # per model: kept, and flagged
    assert rows["alpha"]["benchmarks"]["medqa"]["not_comparable_with"] == {"beta": ["dataset version"],
                                                                           "gamma": ["dataset version"]}
    assert set(rows["alpha"]["pairwise"]) == {"beta", "gamma"}
    assert set(rows["alpha"]["pairwise"]["beta"]) == {"pubmedqa"}  # never paired on medqa
    assert set(rows["beta"]["pairwise"]["gamma"]) == {"medqa", "pubmedqa"}

    table = cli("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    shown = {m: next(line for line in lines if line.startswith(f"{m}\t")).split("\t")[2] for m in rows}
    assert shown == {"alpha": "1.000", "beta": "0.667", "gamma": "0.000"}
    assert "alpha's win rate counts 2 of its 4 (benchmark, rival) pairings: 2 left out, their runs not comparable" \
        in table.stderr
    assert ("gamma on medqa is not comparable with alpha: dataset version. Left out of their win rates, paired "
            "differences and MDE") in table.stderr

    page = page_as(home, "/leaderboard")
    assert page.status_code == 200
    assert _console_win_rates(page.text) == shown
    assert "beta&#39;s win rate counts 3 of its 4 (benchmark, rival) pairings: 1 left out" in page.text
    # the console's win-rate CI leaves out what the win rate does: gamma loses every comparable pairing
    gamma = page.text[page.text.index('<td class="model">gamma</td>'):]
    assert gamma.split('<td class="num ci">')[1].startswith("[0.000, 0.000]")


def test_an_sd_over_one_benchmark_is_undefined_not_zero(tmp_path: Path) -> None:
    """alpha and beta were run on pubmedqa only: `leaderboard` gave each an SD across benchmarks of 0.0 and a win SD
    of 0.0 (and the benchmark's MDE, from one model pair, an SD of 0.0), as if their scores were perfectly
    consistent; an SD of one value is undefined. --json says null, the table and the console n/a and why."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        data = pubmedqa(12)
        fingerprint = register(store, "pubmedqa", data)
        for model, right in (("alpha", 9), ("beta", 6)):
            run_id = add_run(store, model, "pubmedqa", fingerprint, data, answers(data, right))
            score_benchmark(store, SHIPPED, run_id, "pubmedqa")
    cli = Cli(home=home.root, env=cli_env())
    rows = {r["model"]: r for r in cli("leaderboard", "--json", "--resamples", "50").json()}
    assert rows["alpha"]["macro_avg"] == pytest.approx(0.75) and rows["alpha"]["win_rate"] == 1.0
    assert rows["alpha"]["sd"] is None and rows["alpha"]["win_sd"] is None
    assert rows["alpha"]["benchmarks"]["pubmedqa"]["mde"] > 0
    assert rows["alpha"]["benchmarks"]["pubmedqa"]["mde_sd"] is None
    table = cli("leaderboard", "--resamples", "50")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    alpha = next(line for line in lines if line.startswith("alpha\t")).split("\t")
    assert alpha[3] == "n/a" and alpha[5] == "n/a"  # win sd, sd
    assert next(line for line in lines if line.startswith("pubmedqa\t")).split("\t")[2] == "n/a"  # the MDE's sd
    assert "SD n/a: undefined, an SD needs two values" in table.stderr
    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200
    assert page.text.count('<abbr class="sd-undefined"') == 4  # two models: win SD and macro average SD
    assert "SD n/a: undefined, an SD needs two values" in page.text


def _console_ranks(text: str) -> dict[str, str]:
    """Model -> the rank cell of the console's leaderboard table, as shown."""
    cells = re.findall(r'<tr><td class="num">(.*?)</td><td class="model">([^<]+)</td>', text)
    return {model: re.sub(r"<[^>]+>", "", cell) for cell, model in cells}


def test_a_model_without_a_win_rate_is_unranked_not_ranked_as_if_it_lost_everything(tmp_path: Path) -> None:
    """alpha, beta and gamma ran pubmedqa; then its extract was registered again and delta ran it (every pairing
    not comparable: win rate n/a), and solo ran medqa, which no one else ran (no rival at all). Both sorted as if
    their win rate were 0 and, on their higher macro averages, ranked above gamma, which lost every pairing (the
    console numbered them 3 and 4, gamma 5). They now come after the ranked models, unranked, with the reason."""
    home = make_home(tmp_path / "home")
    with Store.open(home) as store:
        m_fp = _alpha_beta_gamma_on_pubmedqa(store)
        _scored_run(store, "solo", "medqa", m_fp, medqa(), 40)
        shorter = pubmedqa()[:-1]
        again = store.register_dataset("pubmedqa", "extract-again-sha256", "test-loader", "test", shorter, {})
        _scored_run(store, "delta", "pubmedqa", again.fingerprint, shorter, 35)
    cli = Cli(home=home.root, env=cli_env())
    board = cli("leaderboard", "--json", "--resamples", "0").json()
    assert [(r["model"], r["rank"]) for r in board] == [("alpha", 1), ("beta", 2), ("gamma", 3), ("delta", None),
                                                        ("solo", None)]
    reasons = {r["model"]: r["unranked_reason"] for r in board}
    assert reasons["alpha"] is None and reasons["gamma"] is None
    assert reasons["delta"] == "all 3 of its (benchmark, rival) pairings are left out, their runs not comparable"
    assert reasons["solo"] == "no other model has a score on any of its benchmarks"

    table = cli("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split("\t")[:3] == ["model", "rank", "win rate"]
    shown = [line.split("\t")[:3] for line in lines[2:7]]
    assert shown == [["alpha", "1", "1.000"], ["beta", "2", "0.500"], ["gamma", "3", "0.000"],
                     ["delta", "unranked", "n/a"], ["solo", "unranked", "-"]]
    assert ("delta: unranked, no win rate: all 3 of its (benchmark, rival) pairings are left out, their runs not "
            "comparable" in table.stderr)
    assert "solo: unranked, no win rate: no other model has a score on any of its benchmarks" in table.stderr

    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200
    assert _console_ranks(page.text) == {"alpha": "1", "beta": "2", "gamma": "3", "delta": "unranked",
                                         "solo": "unranked"}
    assert list(_console_ranks(page.text)) == ["alpha", "beta", "gamma", "delta", "solo"]
    assert "solo: unranked, no win rate: no other model has a score on any of its benchmarks" in page.text


def test_a_lone_model_and_a_model_with_no_score_are_unranked() -> None:
    """One model on the board has no rival: the console numbered it 1. A model whose every benchmark failed has no
    score to compare: it sorted with a win rate of 0."""
    from medhelm_local.records import BenchmarkScore

    def score(model: str, value: float | None) -> BenchmarkScore:
        return BenchmarkScore(model=model, benchmark="pubmedqa", metric="exact_match", score=value,
                              n=0 if value is None else 10, n_failed=10 if value is None else 0)

    (lone,) = build_leaderboard([score("A", 0.9)], specs=SHIPPED)
    assert lone.rank is None and lone.unranked_reason == "no other model has a score on any of its benchmarks"
    rows = build_leaderboard([score("A", 0.9), score("B", 0.1), score("C", None)], specs=SHIPPED)
    assert [(r.model, r.rank) for r in rows] == [("A", 1), ("B", 2), ("C", None)]
    assert rows[2].unranked_reason == "no scored benchmark: every request or judgement failed"
