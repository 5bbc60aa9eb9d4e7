"""The demo's leaderboard is the `leaderboard` command's: one assembly (``analysis.board.load_board``), so the two
cannot drift (comparability, costs, prompt style). Without the embedded model: fake servers answer instead."""

from __future__ import annotations

import json
from pathlib import Path

from medhelm_local.commands.leaderboard import board_payload
from medhelm_local.context import AppContext
from medhelm_local.demo.run_demo import finish, prepare
from medhelm_local.home import Home, ModelEndpoint
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.conftest import Cli, cli_env


def test_the_demo_ranks_what_the_leaderboard_ranks(tmp_path: Path) -> None:
    """fake-a ran 12 PubMedQA instances of the demo home, fake-b a sample of 6: their runs are not comparable, so
    `leaderboard` leaves the pairing out (no win rate for either). The demo built its own leaderboard without that
    check: its table, --json and aggregate-only report gave fake-a a win rate of 1.0 and fake-b 0.0."""
    root = tmp_path / "demo"
    prepare(AppContext(home=Home(root), actor="demo-test"))
    cli = Cli(home=root, env=cli_env())
    with FakeOpenAIServer(responder=lambda _messages: "yes") as server:
        home = Home(root)
        config = home.config.model_copy(deep=True)
        config.models += [ModelEndpoint(name=name, base_urls=[server.base_url]) for name in ("fake-a", "fake-b")]
        home.save_config(config)
        for model, instances in (("fake-a", "12"), ("fake-b", "6")):
            ran = cli("run", "--model", model, "--benchmarks", "pubmedqa", "--max-instances", instances, "--json")
            assert ran.code == 0, ran.stderr
    board = cli("leaderboard", "--json")
    assert board.code == 0, board.stderr
    shown = board.json()
    assert {r["model"]: r["win_rate"] for r in shown} == {"fake-a": None, "fake-b": None}

    demo_board, report_path = finish(AppContext(home=Home(root), actor="demo-test"))
    report = json.loads(report_path.read_text())
    assert {m["model"]: m["win_rate"] for m in report["models"]} == {"fake-a": None, "fake-b": None}
    assert json.loads(json.dumps(board_payload(demo_board))) == shown
