"""The leaderboard compares each model's latest run of a benchmark. Runs made on another version of the dataset,
with another spec or on other instances measured something else: the leaderboard (JSON, table, console) names
what differs instead of ranking them silently as if they were alike."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

from medhelm_local.analysis.comparability import RunConditions, differences
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.errors import BadInputError
from medhelm_local.export.aggregates import collect
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.conftest import Cli
from tests.console.pages import page_as

SAMPLES = Path(str(resources.files("medhelm_local.data") / "samples"))


def _register(cli: Cli, folder: Path, spec: Path) -> None:
    result = cli("datasets", "register", "followup_needed", str(folder / "followup_needed.csv"), "--spec", str(spec))
    assert result.code == 0, result.stderr


def _run(cli: Cli, model: str, *extra: str) -> None:
    result = cli("run", "--model", model, "--benchmarks", "followup_needed", "--json", *extra)
    assert result.code == 0, result.stderr


def test_runs_on_another_dataset_version_spec_or_sample_are_named_not_compared_silently(
        home_cli: Cli, tmp_path: Path) -> None:
    from medhelm_local.home import Home

    extract = tmp_path / "extract"
    extract.mkdir()
    shutil.copy(SAMPLES / "followup_needed.csv", extract)
    spec = tmp_path / "followup_needed.yaml"
    shutil.copy(SAMPLES / "followup_needed.yaml", spec)
    _register(home_cli, extract, spec)
    with FakeOpenAIServer(responder=lambda _m: "A") as server:
        for model in ("alpha", "beta", "gamma", "delta"):
            assert home_cli("models", "add", model, "--base-url", server.base_url).code == 0
        _run(home_cli, "alpha")
        _run(home_cli, "beta")  # alike: comparable with alpha
        _run(home_cli, "gamma", "--max-instances", "3")  # a sample of the same dataset
        lines = (extract / "followup_needed.csv").read_text().splitlines(keepends=True)
        (extract / "followup_needed.csv").write_text("".join(lines[:-1]))  # the extract loses a row
        _register(home_cli, extract, spec)
        _run(home_cli, "delta")

    board = home_cli("leaderboard", "--json", "--resamples", "0").json()
    current = {r["model"]: r["benchmarks"]["followup_needed"]["dataset_current"] for r in board}
    assert current == {"alpha": False, "beta": False, "gamma": False, "delta": True}
    rows = {r["model"]: r["benchmarks"]["followup_needed"]["not_comparable_with"] for r in board}
    assert rows["alpha"] == rows["beta"] == {"delta": ["dataset version"], "gamma": ["instances (all 6 against 3 of "
                                                                                     "6 sampled with seed 0)"]}
    assert rows["alpha"]["gamma"] == ["instances (all 6 against 3 of 6 sampled with seed 0)"]
    assert rows["delta"] == {"alpha": ["dataset version"], "beta": ["dataset version"],
                             "gamma": ["dataset version"]}
    assert set(rows["gamma"]) == {"alpha", "beta", "delta"}
    # a pairing of unlike runs is no win and no loss: alpha and beta count only each other (a tie: a win for both);
    # gamma (a sample) and delta (another version) have no comparable rival, so no win rate, never a number
    rates = {r["model"]: (r["win_rate"], r["win_pairs"], r["win_pairs_left_out"]) for r in board}
    assert rates == {"alpha": (1.0, 1, 2), "beta": (1.0, 1, 2), "gamma": (None, 0, 3), "delta": (None, 0, 3)}
    # nor are they paired on the instances they share: alpha's paired differences are with beta only
    pairwise = {r["model"]: r["pairwise"] for r in board}
    assert set(pairwise["alpha"]) == {"beta"} and pairwise["gamma"] == {} and pairwise["delta"] == {}

    table = home_cli("leaderboard", "--resamples", "0")
    assert table.code == 0
    said = table.stdout + table.stderr
    assert "delta on followup_needed is not comparable with alpha: dataset version; beta: dataset version" in said
    assert "[another dataset version; not comparable: see below]" in said
    assert "alpha on followup_needed scored another version of its dataset than the one registered last" in said
    assert "gamma: unranked, no win rate: all 3 of its (benchmark, rival) pairings are left out" in said
    gamma = next(line for line in table.stdout.splitlines() if line.startswith("gamma\t")).split("\t")
    assert gamma[1:3] == ["unranked", "n/a"]  # rank, win rate

    home = Home(home_cli.home)
    page = page_as(home, "/leaderboard?resamples=0")
    assert page.status_code == 200
    assert "delta on followup_needed is not comparable with alpha: dataset version" in page.text
    assert page.text.count('<abbr class="win-left-out"') == 2  # gamma's and delta's win rates: n/a

    # An export publishes win rates too: it refuses unlike runs, naming them, and takes alike ones.
    runs = {r["model"]: r["run_id"] for r in home_cli("runs", "list", "--json").json()}
    specs = SpecRegistry(home.root)
    with Store.open(home, read_only=True) as store:
        assert len(collect(store, specs, home.config, [runs["alpha"], runs["beta"]]).cells) == 2
        with pytest.raises(BadInputError, match="alpha's run of followup_needed is not comparable with delta's: "
                                                "dataset version"):
            collect(store, specs, home.config, [runs["alpha"], runs["delta"]])


def test_a_changed_spec_is_named_by_its_fields() -> None:
    spec = {"id": "b", "name": "B", "max_tokens": 8, "prompt": {"template": "{q}"}}
    own = RunConditions(datasets=frozenset({"v1"}), spec=spec, instances="all 10")
    edited = RunConditions(datasets=frozenset({"v1"}), spec={**spec, "name": "Renamed", "max_tokens": 16,
                                               "prompt": {"template": "Q: {q}"}}, instances="all 10")
    assert differences(own, edited) == ["spec (max_tokens, prompt.template)"]  # the name decides nothing
    assert differences(own, own) == []
    before_snapshots = RunConditions(datasets=frozenset({"v1"}), spec=None, instances="all 10")
    assert differences(own, before_snapshots) == []  # nothing to compare: not claimed to differ
