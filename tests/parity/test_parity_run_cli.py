"""``run --prompt-style medhelm`` through the CLI against the fake OpenAI-compatible server: the request bodies
carry HELM's own prompt and decoding for the golden items, HELM-format answers are scored against the same gold,
the manifest records the style and its hashes, and leaderboards and exports never mix styles."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.benchmarks.registry import SHIPPED
from medhelm_local.export.aggregates import collect
from medhelm_local.home import Home
from medhelm_local.store import Store
from medhelm_local.testing.fake_openai import FakeOpenAIServer
from tests.compliance.conftest import REQUESTER, signers, write_policy
from tests.conftest import Cli
from tests.parity.helm_cases import helm_goldens

GOLDENS = {g["benchmark"]: g for g in helm_goldens()}


def small_pubmedqa(public_data: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The first 6 real PubMedQA items (the golden item among them) and their gold answers."""
    data = json.loads((public_data / "pubmedqa" / "ori_pqal.json").read_text())
    kept = dict(list(data.items())[:6])
    path = tmp_path / "ori_pqal.json"
    path.write_text(json.dumps(kept), encoding="utf-8")
    return path, {v["QUESTION"].strip(): v["final_decision"] for v in kept.values()}


def small_medqa(public_data: Path, tmp_path: Path) -> Path:
    lines = (public_data / "medqa" / "phrases_no_exclude_test.jsonl").read_text().splitlines()[:6]
    path = tmp_path / "medqa.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def helm_style_oracle(pubmedqa_gold: dict[str, str], medqa_gold: dict[str, str]) -> Any:
    """Answers as MedHELM's prompts ask: a letter (PubMedQA: A yes, B no, C maybe); the default prompts get
    the word."""
    letters = {"yes": "A", "no": "B", "maybe": "C"}

    def respond(messages: list[dict[str, Any]]) -> str:
        content = messages[-1]["content"]
        helm = len(messages) == 1 and content.startswith(("Answer A for yes", "Give a letter answer"))
        for question, answer in pubmedqa_gold.items():
            if question in content:
                return letters[answer] if helm else answer
        for question, letter in medqa_gold.items():
            if question[:200] in content:
                return letter
        return "unsure"

    return respond


@pytest.fixture
def server(public_data: Path, tmp_path: Path) -> Iterator[tuple[FakeOpenAIServer, Path, Path]]:
    pubmedqa, pubmedqa_gold = small_pubmedqa(public_data, tmp_path)
    medqa = small_medqa(public_data, tmp_path)
    medqa_gold = {json.loads(line)["question"]: json.loads(line)["answer_idx"]
                  for line in medqa.read_text().splitlines()}
    with FakeOpenAIServer(responder=helm_style_oracle(pubmedqa_gold, medqa_gold), record_bodies=True) as fake:
        yield fake, pubmedqa, medqa


def _ok(result: Any) -> Any:
    assert result.code == 0, result.stderr
    return result.json()


def test_parity_run_sends_helms_prompts_records_the_style_and_keeps_leaderboards_apart(
        home_cli: Cli, server: tuple[FakeOpenAIServer, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake, pubmedqa, medqa = server
    _ok(home_cli("datasets", "register", "pubmedqa", str(pubmedqa), "--json"))
    _ok(home_cli("datasets", "register", "medqa", str(medqa), "--json"))
    assert home_cli("models", "add", "oracle", "--base-url", fake.base_url).code == 0

    run = _ok(home_cli("run", "--model", "oracle", "--benchmarks", "pubmedqa,medqa", "--prompt-style", "medhelm",
                       "--json"))
    assert run["prompt_style"] == "medhelm"
    scores = {r["benchmark"]: r for r in run["results"]}
    assert scores["pubmedqa"]["score"] == 1.0 and scores["pubmedqa"]["n"] == 6  # "A" scored as "yes"
    assert scores["medqa"]["score"] == 1.0 and scores["medqa"]["n"] == 6

    # Byte for byte what HELM's own adapter rendered for the golden items, as one user message.
    for benchmark in ("pubmedqa", "medqa"):
        golden = GOLDENS[benchmark]
        sent = [b for b in fake.bodies if b["messages"][-1]["content"] == golden["prompt"]]
        assert len(sent) == 1, benchmark
        assert sent[0]["messages"] == [{"role": "user", "content": golden["prompt"]}]
        assert sent[0]["max_tokens"] == golden["max_tokens"]
        assert sent[0]["temperature"] == golden["temperature"]
        assert sent[0].get("stop", []) == golden["stop_sequences"]

    manifest = _ok(home_cli("runs", "manifest", run["run_id"]))["manifest"]
    assert manifest["prompt_style"]["name"] == "medhelm"
    assert set(manifest["prompt_style"]["sha256"]) == {"pubmedqa", "medqa"}
    assert manifest["decoding"]["max_tokens"] == {"pubmedqa": 1, "medqa": 1}

    # The same model in the default style: a different plan, so a new run, never a resume of the parity one.
    default = _ok(home_cli("run", "--model", "oracle", "--benchmarks", "pubmedqa", "--json"))
    assert default["run_id"] != run["run_id"] and default["prompt_style"] == "default"
    assert _ok(home_cli("runs", "manifest", default["run_id"]))["manifest"]["prompt_style"]["name"] == "default"

    board_default = _ok(home_cli("leaderboard", "--json", "--resamples", "0"))
    assert [(r["model"], r["prompt_style"], sorted(r["benchmarks"])) for r in board_default] == [
        ("oracle", "default", ["pubmedqa"])]
    board_medhelm = _ok(home_cli("leaderboard", "--prompt-style", "medhelm", "--json", "--resamples", "0"))
    assert [(r["model"], r["prompt_style"], sorted(r["benchmarks"])) for r in board_medhelm] == [
        ("oracle", "medhelm", ["medqa", "pubmedqa"])]
    assert board_medhelm[0]["benchmarks"]["pubmedqa"]["prompt_sha256"] == manifest["prompt_style"]["sha256"][
        "pubmedqa"]
    plain = home_cli("leaderboard", "--resamples", "0")
    assert plain.code == 0 and "prompt style: default" in plain.stdout
    assert "prompt style 'medhelm' not shown" in plain.stdout + plain.stderr

    listing = _ok(home_cli("runs", "list", "--json"))
    assert {r["run_id"]: r["prompt_style"] for r in listing} == {run["run_id"]: "medhelm",
                                                                  default["run_id"]: "default"}

    # Resuming a run in another style is refused; so is exporting runs of two styles together.
    clash = home_cli("run", "--resume", run["run_id"], "--prompt-style", "default")
    assert clash.code == 2 and "prompt style" in clash.stderr
    from medhelm_local.export.policy import POLICY_ENV

    monkeypatch.setenv(POLICY_ENV, "")  # write_policy sets it in this process: restored after the test
    home_cli.env[POLICY_ENV] = str(write_policy(home_cli.home))
    key = ["--key", str(signers(home_cli.home)[REQUESTER].private)]
    mixed = home_cli("export", "request", "--runs", f"{run['run_id']},{default['run_id']}", *key)
    assert mixed.code == 2 and "prompt styles" in mixed.stderr
    home = Home(home_cli.home)
    with Store.open(home, read_only=True) as store:
        raw = collect(store, SHIPPED, home.config, [run["run_id"]])
    assert [r.prompt_style for r in raw.runs] == ["medhelm"]
    published = home_cli("export", "request", "--runs", run["run_id"], *key, "--json")
    assert published.code in (0, 1), published.stderr  # 1: held back by the disclosure policy (small cells)
    scans = ("string_allowlist", "phi_patterns", "extract_terms")
    assert not [c["id"] for c in published.json()["checks"] if c["id"] in scans and c["result"] == "fail"]


def test_parity_mode_refuses_benchmarks_without_parity_and_unknown_styles(home_cli: Cli) -> None:
    refused = home_cli("run", "--model", "any", "--benchmarks", "pubmedqa,dischargeme", "--prompt-style", "medhelm")
    assert refused.code == 2
    assert "dischargeme" in refused.stderr and "MedHELM parity is impossible" in refused.stderr
    private = home_cli("run", "--model", "any", "--benchmarks", "hospice_referral", "--prompt-style", "medhelm")
    assert private.code == 2 and "private data" in private.stderr
    unknown = home_cli("run", "--model", "any", "--benchmarks", "pubmedqa", "--prompt-style", "helm-ish")
    assert unknown.code == 2 and "--prompt-style" in unknown.stderr
    board = home_cli("leaderboard", "--prompt-style", "helm-ish")
    assert board.code == 2
