"""Costs, prices and times as people read them (medhelm_local/formatting.py): a measured non-zero amount never
reads as zero, an unknown one reads as unknown, and ``--json`` keeps the full-precision number."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from medhelm_local.export.aggregates import round_cost
from medhelm_local.export.scan import NUMERIC, PATTERNS
from medhelm_local.formatting import duration, money
from medhelm_local.home import Home
from medhelm_local.home.config import ModelEndpoint, Pricing
from medhelm_local.store import Store
from medhelm_local.webconsole.app import templates
from tests.analysis.test_leaderboard_cli import answers, medqa, pubmedqa
from tests.conftest import Cli, cli_env
from tests.scoring.helpers import add_run, make_home, register

AMOUNTS = [3e-12, 4.2e-9, 3.47e-05, 0.0001475, 0.000999, 0.001234, 0.0049, 0.05, 0.5, 1.0, 3.25, 12.5, 1234.5678,
           98765.4321]


@pytest.mark.parametrize("value", AMOUNTS)
def test_a_cost_is_written_non_zero_with_four_significant_digits(value: float) -> None:
    for decimals in (0, 2, 3):
        text = money(value, decimals=decimals)
        assert float(text) != 0 and math.isclose(float(text), value, rel_tol=5e-4), (text, decimals)
        if "e" not in text and "." in text:
            assert len(text.split(".")[1]) >= decimals  # "12.50" beside "3.25": never fewer than asked
        # what an export's report writes passes its scan: a number, no record-number-like run of digits
        assert NUMERIC.match(text) and not PATTERNS["mrn"].search(text), text


def test_known_forms_and_the_unknown() -> None:
    assert money(0.0000347) == "3.47e-05"
    assert money(0.004) == "0.004"
    assert money(12.5) == "12.50" and money(3.25) == "3.25" and money(1234.5678) == "1234.57"
    assert money(0.0) == "0.00"  # a cost priced at zero is zero
    assert money(None) == "-" and money(None, unknown="unavailable") == "unavailable"
    assert money(float("nan"), unknown="unavailable") == "unavailable"
    assert duration(0.04) == "0.04" and duration(0.0004) == "0.0004" and duration(12.345) == "12.3"
    assert duration(0.0) == "0.0" and duration(None) == "-"


def test_an_exported_cost_keeps_its_significant_digits_where_the_policy_would_round_it_to_zero() -> None:
    assert round_cost(0.0012345, 2) == 0.0012
    assert round_cost(0.0000347, 2) == 0.000035
    assert round_cost(0.4, 0) == 0.4
    assert round_cost(12.345, 2) == 12.35 and round_cost(0.0, 2) == 0.0  # rounded by the policy as before


def test_the_consoles_filters_write_costs_and_times_with_the_shared_formatter() -> None:
    env = templates()
    assert env.from_string('{{ c|money(unknown="unavailable") }}').render(c=0.0000347) == "3.47e-05"
    assert env.from_string('{{ c|money(unknown="unavailable") }}').render(c=None) == "unavailable"
    assert env.from_string("{{ t|duration }}").render(t=0.04) == "0.04"


def _tiny_run(tmp_path: Path, *also: str) -> tuple[Home, str]:
    """A home whose model "tiny" answered 12 PubMedQA items (6 right, 10 prompt and 1 completion tokens each), and
    a run of each model in ``also`` (3 right, no token counts)."""
    home = make_home(tmp_path / "home")
    data = pubmedqa(12)
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        run_id = add_run(store, "tiny", "pubmedqa", fingerprint, data, answers(data, 6), prompt_tokens=10,
                         completion_tokens=1)
        for model in also:
            add_run(store, model, "pubmedqa", fingerprint, data, answers(data, 3))
    return home, run_id


def test_cli_shows_a_small_cost_and_time_non_zero_and_json_keeps_the_number(tmp_path: Path) -> None:
    home, run_id = _tiny_run(tmp_path, "unpriced")
    with Store.open(home) as store:
        store.conn.execute("UPDATE runner_sessions SET wall_s = 0.04 WHERE run_id = ?", [run_id])
    config = home.config.model_copy(deep=True)
    config.models.append(ModelEndpoint(name="tiny", base_urls=["http://127.0.0.1:9/v1"],
                                       pricing=Pricing(input_per_million=0.5, output_per_million=1.5)))
    home.save_config(config)
    expected = 12 * (10 * 0.5 + 1 * 1.5) / 1e6  # 7.8e-05
    cli = Cli(home=home.root, env=cli_env())

    rows = cli("leaderboard", "--json", "--resamples", "0").json()
    assert isinstance(rows, list)
    by_model = {r["model"]: r for r in rows}
    assert by_model["tiny"]["cost"] == pytest.approx(expected, rel=1e-9)  # the number, not a rounding of it
    assert by_model["unpriced"]["cost"] is None

    table = cli("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    lines = [line.split("\t") for line in table.stdout.splitlines() if not line.startswith("#")]
    header, body = lines[0], {row[0]: row for row in lines[1:]}
    cost = header.index("cost")
    assert body["tiny"][cost] == "7.8e-05"  # was 0.000
    assert body["unpriced"][cost] == "unavailable"

    shown = cli("runs", "show", run_id)
    assert shown.code == 0, shown.stderr
    assert "wall 0.04s" in shown.stderr and "cost 7.8e-05 (tokens" in shown.stderr  # was 0.0s
    assert cli("runs", "show", run_id, "--json").json()["cost"]["total"] == pytest.approx(expected, rel=1e-9)


def test_a_category_leaderboard_costs_only_the_runs_behind_its_scores(tmp_path: Path) -> None:
    """``--category`` shows the win rate on that category's benchmarks: the cost beside it (and the Pareto front
    drawn from both) is the cost of the runs of those benchmarks, not of every run of the model."""
    home = make_home(tmp_path / "home")
    p_data, m_data = pubmedqa(12), medqa(12)
    with Store.open(home) as store:
        p_fp, m_fp = register(store, "pubmedqa", p_data), register(store, "medqa", m_data)
        for model, right in (("tiny", 6), ("other", 3)):
            add_run(store, model, "pubmedqa", p_fp, p_data, answers(p_data, right), prompt_tokens=1000,
                    completion_tokens=100)
            add_run(store, model, "medqa", m_fp, m_data, answers(m_data, right), prompt_tokens=10,
                    completion_tokens=1)
    config = home.config.model_copy(deep=True)
    config.models += [ModelEndpoint(name=name, base_urls=["http://127.0.0.1:9/v1"],
                                    pricing=Pricing(input_per_million=0.5, output_per_million=1.5))
                      for name in ("tiny", "other")]
    home.save_config(config)
    cli = Cli(home=home.root, env=cli_env())
    medqa_cost = 12 * (10 * 0.5 + 1 * 1.5) / 1e6
    pubmedqa_cost = 12 * (1000 * 0.5 + 100 * 1.5) / 1e6
    everything = {r["model"]: r for r in cli("leaderboard", "--json", "--resamples", "0").json()}
    assert everything["tiny"]["cost"] == pytest.approx(medqa_cost + pubmedqa_cost, rel=1e-9)
    result = cli("leaderboard", "--json", "--resamples", "0", "--category", "Clinical Decision Support")
    assert result.code == 0, result.stderr
    rows = {r["model"]: r for r in result.json()}
    assert set(rows["tiny"]["benchmarks"]) == {"medqa"}
    assert rows["tiny"]["cost"] == pytest.approx(medqa_cost, rel=1e-9)  # was medqa + pubmedqa
    assert rows["other"]["cost"] == pytest.approx(medqa_cost, rel=1e-9)


def test_runs_show_lists_the_sessions_and_their_endpoints(tmp_path: Path) -> None:
    """``runs show`` says it shows the sessions (time, tokens, endpoints): its plain output does, not only --json."""
    home, run_id = _tiny_run(tmp_path)
    with Store.open(home) as store:
        store.conn.execute("UPDATE runner_sessions SET endpoints = ? WHERE run_id = ?",
                           [json.dumps([{"url": "http://127.0.0.1:9/v1", "version": "0.9.1"}]), run_id])
    shown = Cli(home=home.root, env=cli_env())("runs", "show", run_id)
    assert shown.code == 0, shown.stderr
    assert "session test (new): 12 response(s), 0 error(s), wall 1.0s, 120 prompt + 12 completion tokens" in (
        shown.stderr)
    assert "endpoints: http://127.0.0.1:9/v1 (0.9.1)" in shown.stderr


def test_failed_requests_are_said_to_be_unpriced_under_token_pricing(tmp_path: Path) -> None:
    """A failed request has no usage: under token pricing it adds nothing, and the note says so rather than let
    a run with failures read as cheaper than it may have been."""
    from medhelm_local.analysis.cost import run_cost

    home = make_home(tmp_path / "home")
    endpoint = ModelEndpoint(name="tiny", base_urls=["http://127.0.0.1:9/v1"],
                             pricing=Pricing(input_per_million=1.0, output_per_million=1.0))
    data = pubmedqa(6)
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        failing = add_run(store, "tiny", "pubmedqa", fingerprint, data, answers(data, 2, failed=2), prompt_tokens=10,
                          completion_tokens=1)
        clean = add_run(store, "tiny", "pubmedqa", fingerprint, data, answers(data, 2), prompt_tokens=10,
                        completion_tokens=1)
        with_failures, without = run_cost(store, failing, endpoint), run_cost(store, clean, endpoint)
    assert (with_failures.errors, with_failures.total) == (2, pytest.approx(4 * 11 / 1e6))
    assert with_failures.note.endswith("; 2 failed request(s) carry no usage and are not priced")
    assert "failed" not in without.note


def _one_priced_home(tmp_path: Path) -> Home:
    """Two models scored on pubmedqa: "tiny" priced in appliance.yaml, "other" not configured at all."""
    from medhelm_local.benchmarks.registry import SHIPPED
    from medhelm_local.scoring.engine import score_benchmark

    home = make_home(tmp_path / "home")
    data = pubmedqa(12)
    with Store.open(home) as store:
        fingerprint = register(store, "pubmedqa", data)
        for model, right in (("tiny", 6), ("other", 9)):
            run_id = add_run(store, model, "pubmedqa", fingerprint, data, answers(data, right), prompt_tokens=10,
                             completion_tokens=1)
            score_benchmark(store, SHIPPED, run_id, "pubmedqa")
    config = home.config.model_copy(deep=True)
    config.models.append(ModelEndpoint(name="tiny", base_urls=["http://127.0.0.1:9/v1"],
                                       pricing=Pricing(input_per_million=0.5, output_per_million=1.5)))
    home.save_config(config)
    return home


def test_a_model_without_a_cost_is_named_where_the_cost_and_pareto_front_leave_it_out(tmp_path: Path) -> None:
    """One model priced, one not. The CLI's table read "unavailable" and pareto "-" for the unpriced model with no
    word why (the note came only when no model had a cost), and the console's cost scatter dropped it silently, its
    one priced rival alone "on the Pareto front". Both now name the model left out and why."""
    from medhelm_local.home.config import ConsoleRole
    from tests.console.pages import page_as

    home = _one_priced_home(tmp_path)
    table = Cli(home=home.root, env=cli_env())("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    assert ("cost unavailable for other (model no longer configured); the pareto column compares only the models "
            "with a cost") in table.stderr

    page = page_as(home, "/leaderboard", ConsoleRole.INFORMATICS)
    assert page.status_code == 200
    note = page.text.split('id="fig-scatter"')[1]
    assert ("Not plotted: other (cost unavailable: model no longer configured). The Pareto front compares only the "
            "models plotted.") in " ".join(note.split())


def test_the_leaderboard_table_says_yes_or_no_for_the_pareto_front(tmp_path: Path) -> None:
    """The CLI's pareto column read Python's "True" (and "False"), where the console and `datasets list` say yes and
    no; a model with no cost still reads "-"."""
    table = Cli(home=_one_priced_home(tmp_path).root, env=cli_env())("leaderboard", "--resamples", "0")
    assert table.code == 0, table.stderr
    board = table.stdout.split("\n# ")[0]  # the models table, before the MDE and paired-difference tables
    lines = [line.split("\t") for line in board.splitlines() if not line.startswith("#")]
    header, body = lines[0], {row[0]: row for row in lines[1:]}
    pareto = header.index("pareto")
    assert (body["tiny"][pareto], body["other"][pareto]) == ("yes", "-")
